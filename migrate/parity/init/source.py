"""The original tree as ``parity init`` reads it: every class and function of its Python files,
parsed with libcst, with line spans, bases, methods and the names each file imports.

Nothing is imported or run: the tree is read, never executed, so a repository whose modules need
packages that are not installed (or a GPU) can still be given a spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ...codegen import code
from ...rules._table import dotted

_EMPTY = cst.Module(body=[])


def code_of(node: cst.CSTNode) -> str:
    return code(_EMPTY, node)


@dataclass
class Function:
    name: str
    node: cst.FunctionDef
    path: str
    start: int
    end: int
    owner: Optional["ClassInfo"] = None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.start}"

    def params(self) -> List[cst.Param]:
        p = self.node.params
        return [*p.posonly_params, *p.params, *p.kwonly_params]


@dataclass
class ClassInfo:
    name: str
    node: cst.ClassDef
    path: str
    start: int
    end: int
    bases: List[str]
    methods: Dict[str, Function] = field(default_factory=dict)
    decorators: List[str] = field(default_factory=list)
    assigns: Dict[str, cst.BaseExpression] = field(default_factory=dict)  # class-level NAME = value
    fields: List[Tuple[str, Optional[cst.BaseExpression], int]] = field(default_factory=list)  # NAME: T [= v]

    @property
    def where(self) -> str:
        return f"{self.path}:{self.start}"

    @property
    def is_dataclass(self) -> bool:
        return any(d.split(".")[-1] == "dataclass" for d in self.decorators)


@dataclass
class SourceFile:
    path: str  # relative to the tree, posix
    module: cst.Module
    positions: object
    imports: Dict[str, str] = field(default_factory=dict)  # local name -> dotted origin ("x.y.Name")
    classes: Dict[str, ClassInfo] = field(default_factory=dict)
    functions: Dict[str, Function] = field(default_factory=dict)

    def line(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def span(self, node: cst.CSTNode) -> Tuple[int, int]:
        pos = self.positions[node]
        return pos.start.line, pos.end.line


def _import_names(module: cst.Module, path: str) -> Dict[str, str]:
    package = path.rsplit("/", 1)[0].replace("/", ".") if "/" in path else ""
    found: Dict[str, str] = {}
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                origin = dotted(small.module) if small.module else ""
                if small.relative:
                    base = package.split(".") if package else []
                    up = len(small.relative) - 1
                    base = base[: len(base) - up] if up else base
                    origin = ".".join(filter(None, [*base, origin or ""]))
                for alias in small.names:
                    name = dotted(alias.name)
                    local = alias.asname.name.value if alias.asname else name
                    found[local] = f"{origin}.{name}" if origin else name
            elif isinstance(small, cst.Import):
                for alias in small.names:
                    name = dotted(alias.name)
                    local = alias.asname.name.value if alias.asname else name.split(".")[0]
                    found[local] = name if alias.asname else name.split(".")[0]
    return found


def read_file(root: Path, rel: str) -> Optional[SourceFile]:
    try:
        text = (root / rel).read_text(encoding="utf-8")
        wrapper = MetadataWrapper(cst.parse_module(text))
    except (OSError, UnicodeDecodeError, cst.ParserSyntaxError):
        return None
    source = SourceFile(rel, wrapper.module, wrapper.resolve(PositionProvider), _import_names(wrapper.module, rel))
    for statement in wrapper.module.body:
        if isinstance(statement, cst.ClassDef):
            info = _class(source, statement)
            source.classes[info.name] = info
        elif isinstance(statement, cst.FunctionDef):
            start, end = source.span(statement)
            source.functions[statement.name.value] = Function(statement.name.value, statement, rel, start, end)
    return source


def _class(source: SourceFile, node: cst.ClassDef) -> ClassInfo:
    start, end = source.span(node)
    bases = [code_of(arg.value) for arg in node.bases if arg.keyword is None]
    decorators = [code_of(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator)
                  for d in node.decorators]
    info = ClassInfo(node.name.value, node, source.path, start, end, bases, decorators=decorators)
    body = node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
    for statement in body:
        if isinstance(statement, cst.FunctionDef):
            f_start, f_end = source.span(statement)
            info.methods[statement.name.value] = Function(statement.name.value, statement, source.path, f_start, f_end,
                                                          info)
        elif isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                    info.fields.append((small.target.value, small.value, source.line(statement)))
                elif isinstance(small, cst.Assign) and len(small.targets) == 1 \
                        and isinstance(small.targets[0].target, cst.Name):
                    info.assigns[small.targets[0].target.value] = small.value
    return info


@dataclass
class Tree:
    root: Path
    files: Dict[str, SourceFile]

    @classmethod
    def read(cls, root: Path, paths: Iterable[str]) -> "Tree":
        files = {}
        for rel in paths:
            if rel.endswith(".py"):
                source = read_file(root, rel)
                if source is not None:
                    files[rel] = source
        return cls(root, files)

    def classes(self) -> Iterable[ClassInfo]:
        for source in self.files.values():
            yield from source.classes.values()

    def resolve_class(self, name: str, where: str) -> Optional[ClassInfo]:
        """The tree's class a name in file ``where`` refers to: defined there, imported from a
        tree module, or (failing those) the only class of that name in the tree."""
        source = self.files.get(where)
        last = name.split(".")[-1]
        if source is not None and "." not in name and name in source.classes:
            return source.classes[name]
        origin = source.imports.get(name.split(".")[0]) if source is not None else None
        if origin and "." not in name:
            last = origin.split(".")[-1]  # from x import Config as BaseConfig
        candidates = [c for c in self.classes() if c.name == last]
        if origin:
            wanted = (origin + name[len(name.split(".")[0]):]).split(".")
            for c in candidates:
                if c.path == where:
                    continue  # an import names another module's class, not this file's
                module = c.path[:-3].replace("/", ".")
                if module.endswith(".".join(wanted[:-1])) or ".".join(wanted[:-1]).endswith(module.split(".")[-1]):
                    return c
        return candidates[0] if len(candidates) == 1 else None

    def resolve_function(self, name: str, where: str) -> Optional[Function]:
        source = self.files.get(where)
        if source is None:
            return None
        if name in source.functions:
            return source.functions[name]
        origin = source.imports.get(name)
        if origin:
            module, _, attr = origin.rpartition(".")
            for other in self.files.values():
                if attr in other.functions and other.path[:-3].replace("/", ".").endswith(module.split(".")[-1]):
                    return other.functions[attr]
        return None


class _FirstName(cst.CSTVisitor):
    def __init__(self, name: str):
        self.name = name
        self.first: Optional[cst.CSTNode] = None

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name and self.first is None:
            self.first = node


def first_use(tree: Tree, function: Function, name: str) -> str:
    """``path:line`` where ``function``'s body first uses ``name`` (the function's line when it does not)."""
    visitor = _FirstName(name)
    function.node.body.visit(visitor)
    if visitor.first is None:
        return function.where
    return f"{function.path}:{tree.files[function.path].line(visitor.first)}"
