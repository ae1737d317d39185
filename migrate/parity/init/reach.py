"""Which model classes reach a rewritten site: the ``nn.Module`` subclasses whose ``forward`` leads
to a site ``migrate run`` rewrote (report.json), and the top-level models that contain them.

A class reaches a site when the site lies in a function its ``forward`` calls, directly or through
other methods of the class (``self.m(...)``, inherited ones too) and functions of the tree
(``apply_rotary(...)``), in its constructor (a module it builds, ``nn.RMSNorm(dim)`` made fused),
or in a class it contains. A class contains another when one of its
methods constructs it (``self.attn = Attention(config)``, ``ModuleList([Block(...) ...])``). The
top-level models are the reaching classes that no other reaching class contains; each gets a
parity case, which runs every site its parts reach.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from .source import ClassInfo, Function, Tree, dotted

# base classes from outside the tree that make a class a module
MODULE_BASES = {"Module", "Sequential", "ModuleList", "ModuleDict", "LightningModule", "PreTrainedModel"}
NUMERICS_CHANGING = "numerics-changing"


@dataclass(frozen=True)
class Site:
    path: str
    line: int
    code: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.code}"


def rewritten_sites(report: dict) -> List[Site]:
    """The numerics-changing sites report.json lists as rewritten (the ones parity must see run)."""
    return [Site(f["path"], f["line"], f["code"]) for f in report.get("findings", [])
            if f.get("action") == "rewritten" and f.get("safety") == NUMERICS_CHANGING]


@dataclass
class Model:
    cls: ClassInfo
    sites: Set[Site] = field(default_factory=set)  # every site its forward reaches
    parts: Set[str] = field(default_factory=set)  # where of the reaching classes it contains (itself too)
    builder: Optional[Function] = None  # a tree function that builds it (torchtune's ``llama3(...)``)


class _Calls(cst.CSTVisitor):
    """Calls in a function body: ``self.name(...)``, ``name(...)`` and constructed names."""

    def __init__(self):
        self.self_methods: Set[str] = set()
        self.names: Set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            self.self_methods.add(func.attr.value)
        elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call) and dotted(func.value.func) == "super":
            self.self_methods.add(func.attr.value)
        name = dotted(func)
        if name:
            self.names.add(name)


def _calls(function: Function) -> _Calls:
    visitor = _Calls()
    function.node.body.visit(visitor)
    return visitor


class Reach:
    def __init__(self, tree: Tree, sites: List[Site]):
        self.tree = tree
        self.sites = sites
        self._is_module: Dict[str, bool] = {}
        self._reach: Dict[Tuple[str, str], Set[Site]] = {}

    # -- classes ---------------------------------------------------------------------------
    def bases(self, cls: ClassInfo) -> List[ClassInfo]:
        found = []
        for base in cls.bases:
            resolved = self.tree.resolve_class(base, cls.path)
            if resolved is not None and resolved is not cls:
                found.append(resolved)
        return found

    def is_module(self, cls: ClassInfo, seen: Optional[Set[str]] = None) -> bool:
        if cls.where in self._is_module:
            return self._is_module[cls.where]
        seen = (seen or set()) | {cls.where}
        result = any(b.split(".")[-1] in MODULE_BASES or b.endswith("PreTrainedModel") for b in cls.bases) or any(
            self.is_module(b, seen) for b in self.bases(cls) if b.where not in seen)
        self._is_module[cls.where] = result
        return result

    def method(self, cls: ClassInfo, name: str, seen: Optional[Set[str]] = None) -> Optional[Function]:
        """``name`` on ``cls`` or the first tree base class that defines it."""
        if name in cls.methods:
            return cls.methods[name]
        seen = (seen or set()) | {cls.where}
        for base in self.bases(cls):
            if base.where not in seen:
                found = self.method(base, name, seen)
                if found is not None:
                    return found
        return None

    def contained(self, cls: ClassInfo) -> List[ClassInfo]:
        """The tree's module classes that ``cls``'s methods (its bases' too) construct."""
        found: Dict[str, ClassInfo] = {}
        for owner in [cls, *self.bases(cls)]:
            for function in owner.methods.values():
                for name in _calls(function).names:
                    target = self.tree.resolve_class(name, owner.path)
                    if target is not None and target is not cls and self.is_module(target):
                        found[target.where] = target
        return list(found.values())

    # -- reach -----------------------------------------------------------------------------
    def _in(self, function: Function) -> Set[Site]:
        return {s for s in self.sites if s.path == function.path and function.start <= s.line <= function.end}

    def function_reach(self, function: Function, seen: Set[Tuple[str, str]]) -> Set[Site]:
        key = (function.path, f"{function.owner.name if function.owner else ''}.{function.name}:{function.start}")
        if key in seen:
            return set()
        seen.add(key)
        found = self._in(function)
        calls = _calls(function)
        if function.owner is not None:
            for name in calls.self_methods:
                target = self.method(function.owner, name)
                if target is not None:
                    found |= self.function_reach(target, seen)
        for name in calls.names:
            target = self.tree.resolve_function(name, function.path)
            if target is not None:
                found |= self.function_reach(target, seen)
        return found

    def class_reach(self, cls: ClassInfo, stack: Tuple[str, ...] = ()) -> Set[Site]:
        """Every site ``cls``'s forward reaches, through its own code and the classes it contains."""
        if cls.where in stack:
            return set()
        key = (cls.path, cls.name)
        if key not in self._reach:
            forward = self.method(cls, "forward") or self.method(cls, "__call__")
            found = self.function_reach(forward, set()) if forward is not None else set()
            init = self.method(cls, "__init__")
            if init is not None:  # a module the constructor builds (nn.RMSNorm -> a fused one) runs in forward
                found |= self._in(init)
            for part in self.contained(cls):
                found |= self.class_reach(part, stack + (cls.where,))
            self._reach[key] = found
        return self._reach[key]

    def models(self) -> List[Model]:
        """The top-level models, in file order, each with the sites it reaches and its parts."""
        reaching = [c for c in self.tree.classes() if self.is_module(c) and not _is_test(c.path) and self.class_reach(c)]
        inside: Set[str] = set()
        parts: Dict[str, Set[str]] = {}
        for cls in reaching:
            members = self._members(cls)
            parts[cls.where] = members
            inside |= members - {cls.where}
        return [Model(c, set(self.class_reach(c)), parts[c.where]) for c in reaching if c.where not in inside]

    def _members(self, cls: ClassInfo) -> Set[str]:
        found, todo = {cls.where}, [cls]
        while todo:
            for part in self.contained(todo.pop()):
                if part.where not in found:
                    found.add(part.where)
                    todo.append(part)
        return found

    def builders(self) -> List[Model]:
        """Models built by the tree's functions (annotated ``-> Cls`` or ``return Cls(...)`` of a
        module class: torchtune's ``llama3(...)``), each with the sites of what the function
        constructs and calls."""
        if not hasattr(self, "_builders"):
            self._builders: List[Model] = []
            for source in self.tree.files.values():
                for function in source.functions.values():
                    name = _returned_class(function)
                    cls = self.tree.resolve_class(name, function.path) if name else None
                    if cls is None or not self.is_module(cls) or _is_test(function.path):
                        continue
                    sites = self._built_by(function, set())
                    if sites:
                        self._builders.append(Model(cls, sites, {cls.where}, function))
        return self._builders

    def _built_by(self, function: Function, seen: Set[str]) -> Set[Site]:
        if function.where in seen:
            return set()
        seen.add(function.where)
        found = self._in(function)
        for name in _calls(function).names:
            cls = self.tree.resolve_class(name, function.path)
            if cls is not None and self.is_module(cls):
                found |= self.class_reach(cls)
                continue
            target = self.tree.resolve_function(name, function.path)
            if target is not None:
                found |= self._built_by(target, seen)
        return found

    def unreached(self, models: List[Model]) -> List[Site]:
        """Sites no model's forward reaches (a script's function, a method forward never calls)."""
        covered = set().union(*(m.sites for m in models)) if models else set()
        return [s for s in self.sites if s not in covered]


def _returned_class(function: Function) -> Optional[str]:
    """The class a function says it returns (``-> Cls``) or returns constructed (``return Cls(...)``)."""
    returns = function.node.returns
    if returns is not None and dotted(returns.annotation):
        return dotted(returns.annotation)
    found: List[str] = []

    class Returns(cst.CSTVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            if isinstance(node.value, cst.Call) and dotted(node.value.func):
                found.append(dotted(node.value.func))

    function.node.visit(Returns())
    return found[-1] if found else None


def _is_test(path: str) -> bool:
    parts = path.split("/")
    return any(p in ("tests", "test") for p in parts[:-1]) or parts[-1].startswith("test_")
