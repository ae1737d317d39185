"""Adding the imports that fixes need (``import torch_npu``, the vendored helper module), where the
user's isort or ruff (rule I001) would put them.

The imports go into the module's first import block (below a docstring): in isort's sections
(``__future__``, standard library, third party, first party, local relative imports), each
section's ``import x`` statements before its ``from x import y`` ones, sorted by module name
without regard to case, one blank line between sections and below the block. A module is first
party when it is one of the run's top-level names (``first_party``: the modules and packages at
the top of PATH, or of its ``src/``), as ruff decides for a project checked from its root.
``import torch_npu`` is imported for its side effect (it registers the NPU device), so where the
module does not otherwise use the name it carries ``# noqa: F401``, which keeps ``ruff --fix``
and flake8 from deleting it. Existing imports are never moved: a block that was unsorted before
stays as it was, with the new import at the place the sorted order gives among its neighbours.

A module vendored beside the migrated file (the helper) is imported so that it resolves however
the file is loaded::

    try:
        from .npu_glue import npu_glue
    except ImportError:  # not loaded as part of a package
        import npu_glue

The relative import serves a package, a PEP 420 namespace sub-package (a folder without
``__init__.py`` imported as ``pkg.modules.layers``), a ``src/`` layout and transformers' remote-code
loader (which copies the files a modeling file imports in that form and skips imports inside
``try``); the absolute one a file run as ``python path/to/file.py`` (its folder is ``sys.path[0]``)
or imported from its own folder on ``sys.path``. A file imported both ways gets the helper each way.
Which of these applies is decided where the file is loaded, not by guessing the layout here. The
``try`` statement goes below the first import block (isort leaves it there: it is not an import
statement), separated by one blank line.

Only the module's top-level statement list is touched (libcst's AddImportsVisitor gathers every
import with a full traversal and rebuilds the whole tree, about 8x the parse of the file), and
"already imported" is answered by the NameResolver that the rules used.
"""

from __future__ import annotations

import sys
from typing import Callable, FrozenSet, Iterable, List, Optional, Tuple

import libcst as cst
import libcst.matchers as m

from .edits import ImportSpec
from .helpers import BESIDE
from .names import NameResolver
from .tree import TreeIndex, children

SIDE_EFFECT = {"torch_npu"}  # imported for what importing does; the name may go unused
NOQA = "# noqa: F401"
FUTURE, STDLIB, THIRD_PARTY, FIRST_PARTY, LOCAL = range(5)
STDLIB_NAMES: FrozenSet[str] = frozenset(getattr(sys, "stdlib_module_names", ()))


def _statement(spec: ImportSpec, noqa: bool = False) -> cst.BaseStatement:
    alias = f" as {spec.asname}" if spec.asname else ""
    comment = f"  {NOQA}" if noqa else ""
    if spec.beside:
        return cst.parse_statement(BESIDE.format(spec.module))
    if spec.obj is None:
        return cst.parse_statement(f"import {spec.module}{alias}{comment}\n")
    return cst.parse_statement(f"from {spec.module} import {spec.obj}{alias}{comment}\n")


def _present(spec: ImportSpec, names: NameResolver, top_level_code: set) -> bool:
    if spec.beside:  # this form, or one an earlier version wrote (the name bound at the top level)
        return spec.module in names.imports or any(
            f"from .{spec.module} import {spec.module}" == c or f"from . import {spec.module}" == c for c in top_level_code)
    if not spec.module.startswith(".") and spec.obj is None and spec.asname is None:
        head = spec.module.split(".")[0]
        if head in names.imports.get(head, ()):
            return True
    local = spec.asname or spec.obj
    if not spec.module.startswith(".") and spec.obj is not None and f"{spec.module}.{spec.obj}" in names.imports.get(local, ()):
        return True
    return cst.Module([_statement(spec)]).code.strip() in top_level_code


def _is_docstring(statement: cst.CSTNode) -> bool:
    return m.matches(statement, m.SimpleStatementLine(body=[m.Expr(m.SimpleString() | m.ConcatenatedString())]))


def _is_import(statement: cst.CSTNode) -> bool:
    return m.matches(statement, m.SimpleStatementLine(body=[m.Import() | m.ImportFrom()]))


def _dotted(node: Optional[cst.BaseExpression]) -> str:
    if node is None:
        return ""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def sort_key(statement: cst.SimpleStatementLine, first_party: FrozenSet[str]) -> Tuple[int, int, str]:
    """(section, ``import`` before ``from``, module name without case) of an import statement."""
    node = statement.body[0]
    if isinstance(node, cst.Import):
        module = _dotted(node.names[0].name)
        kind = 0
    else:
        module = "." * len(node.relative) + _dotted(node.module)
        kind = 1
    return section(module, first_party), kind, module.lower()


def section(module: str, first_party: FrozenSet[str]) -> int:
    head = module.split(".")[0]
    if module.startswith("."):
        return LOCAL
    if head == "__future__":
        return FUTURE
    if head in STDLIB_NAMES:
        return STDLIB
    return FIRST_PARTY if head in first_party else THIRD_PARTY


def _uses(module: cst.Module, name: str, kept: Callable[[cst.CSTNode], bool]) -> bool:
    """Whether the module reads ``name`` (``torch_npu.x``, ``f(torch_npu)``) outside its top-level
    imports; subtrees for which ``kept`` holds (original code that does not name it) are not entered."""
    stack = [s for s in module.body if not _is_import(s)]
    while stack:
        node = stack.pop()
        if kept(node):
            continue
        if isinstance(node, (cst.Attribute, cst.Arg)) and isinstance(node.value, cst.Name) and node.value.value == name:
            return True
        stack.extend(children(node))
    return False


def _blank(statement: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    return statement.with_changes(leading_lines=(cst.EmptyLine(),))


def _without_blank(statement: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    lines = list(statement.leading_lines)
    while lines and lines[0].comment is None:
        lines.pop(0)
    return statement.with_changes(leading_lines=tuple(lines))


def _insert(body: List[cst.BaseStatement], start: int, new: cst.SimpleStatementLine,
            first_party: FrozenSet[str]) -> List[cst.BaseStatement]:
    """``body`` with ``new`` placed in the import block that begins at ``start``."""
    end = start
    while end < len(body) and _is_import(body[end]):
        end += 1
    key = sort_key(new, first_party)
    at = start
    for index in range(start, end):
        if sort_key(body[index], first_party) <= key:
            at = index + 1
    previous = body[at - 1] if at > start else None
    following = body[at] if at < end else None
    same_as_previous = previous is not None and sort_key(previous, first_party)[0] == key[0]
    if previous is None and following is not None:
        new = new.with_changes(leading_lines=following.leading_lines)  # the block's place (a blank below a docstring)
    elif previous is not None and not same_as_previous:
        new = _blank(new)
    out = list(body)
    if following is not None:
        if previous is None or sort_key(following, first_party)[0] == key[0]:
            out[at] = _without_blank(following) if previous is not None else following.with_changes(leading_lines=())
            if previous is None and sort_key(following, first_party)[0] != key[0]:
                out[at] = _blank(out[at])
        # else: the following statement starts its own section and keeps its blank line
    elif at < len(body) and not _has_blank(body[at]):
        out[at] = body[at].with_changes(leading_lines=(cst.EmptyLine(), *body[at].leading_lines))
    out.insert(at, new)
    return out


def _has_blank(statement: cst.BaseStatement) -> bool:
    return any(line.comment is None for line in getattr(statement, "leading_lines", ()))


def add_imports(module: cst.Module, specs: Iterable[ImportSpec], names: NameResolver,
                first_party: FrozenSet[str] = frozenset(), original: Optional[TreeIndex] = None) -> cst.Module:
    """``module`` with each import of ``specs`` that it lacks, placed in its first import block (a
    module vendored beside the file: its ``try`` statement right below that block). ``original``: the
    index of the module ``module`` was migrated from (its nodes kept as they were are not searched for
    a name they do not hold)."""
    body = list(module.body)
    top_level_code = {module.code_for_node(s).strip() for s in body if isinstance(s, cst.SimpleStatementLine)}
    missing = [spec for spec in dict.fromkeys(specs) if not _present(spec, names, top_level_code)]
    if not missing:
        return module
    start = 1 if body and _is_docstring(body[0]) else 0
    for spec in (s for s in missing if not s.beside):
        kept = (lambda node, name=spec.module: original.contains(node) and name not in original.names(node)) \
            if original is not None else (lambda node: False)
        noqa = spec.obj is None and spec.asname is None and spec.module in SIDE_EFFECT and \
            not _uses(module, spec.module, kept)
        body = _insert(body, start, _statement(spec, noqa), first_party)
    beside = [_statement(spec) for spec in missing if spec.beside]
    if beside:
        end = start
        while end < len(body) and _is_import(body[end]):
            end += 1
        if end > start:
            beside[0] = beside[0].with_changes(leading_lines=(cst.EmptyLine(),))
        rest = body[end:]
        if rest and not _has_blank(rest[0]):
            rest[0] = rest[0].with_changes(leading_lines=(cst.EmptyLine(), *rest[0].leading_lines))
        body = [*body[:end], *beside, *rest]
    return module.with_changes(body=body)
