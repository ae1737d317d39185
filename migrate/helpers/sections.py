"""The vendored helper's sources: ``glue/core.py`` and one section per rule family that calls it
(``glue/<family>.py``, the family's stem as in ``migrate/rules/<family>/``).

Each section is a Python module of its own: a docstring (its part of the helper's docstring), the
imports it uses, and its code. What it takes from another section it imports relatively
(``from .core import _record``): that import is the one declaration of what it needs, and Python
and the linters check it like any other. ``assemble`` joins sections into one module; this module
reads them into ``Section`` records, once, and refuses a source that breaks the format (an import
below the code, an alias, a name two sections define, a need that is no section).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, Optional, Set, Tuple

GLUE_DIR = Path(__file__).resolve().parent / "glue"

#: An import a section makes: ("math", None) for ``import math``, ("functools", "reduce") for
#: ``from functools import reduce``.
Import = Tuple[str, Optional[str]]


class SectionError(ValueError):
    """A section source that does not follow the format above (a mistake in this package)."""


@dataclass(frozen=True)
class Section:
    name: str  # the file's stem: "core", "attention", ...
    doc: str  # its part of the helper's module docstring
    imports: FrozenSet[Import]
    needs: FrozenSet[str]  # the sections it imports from
    body: str  # its code: the text below its imports
    defines: FrozenSet[str]  # its top-level names


def top_level_names(tree: ast.Module) -> Set[str]:
    """The names a module defines at its top level (functions, classes, assignments, imports), also
    inside top-level ``if``/``try``/``with`` blocks."""
    names: Set[str] = set()
    for node in tree.body:
        names |= _defined(node)
    return names


def _defined(node: ast.stmt) -> Set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
    blocks = [getattr(node, field, []) for field in ("body", "orelse", "finalbody")]
    blocks += [h.body for h in getattr(node, "handlers", [])]
    if isinstance(node, (ast.If, ast.Try, ast.With)):
        return {name for block in blocks for child in block for name in _defined(child)}
    return set()


def read_section(path: Path) -> Section:
    source = path.read_text(encoding="utf-8")
    where = f"{path}"
    tree = ast.parse(source, filename=where)
    body = list(tree.body)
    doc = ast.get_docstring(tree, clean=False)
    if doc is None:
        raise SectionError(f"{where}: a section starts with its part of the helper's docstring")
    if "\\" in doc or '"""' in doc:
        raise SectionError(f"{where}: its docstring holds a backslash or triple quotes")
    body.pop(0)
    imports: Set[Import] = set()
    needs: Set[str] = set()
    last = tree.body[0]
    while body and isinstance(body[0], (ast.Import, ast.ImportFrom)):
        last = node = body.pop(0)
        if any(alias.asname for alias in node.names):
            raise SectionError(f"{where}:{node.lineno}: an import with an alias")
        if isinstance(node, ast.Import):
            imports |= {(alias.name, None) for alias in node.names}
        elif node.level == 1 and node.module:
            needs.add(node.module)
        elif node.level == 0 and node.module:
            imports |= {(node.module, alias.name) for alias in node.names}
        else:
            raise SectionError(f"{where}:{node.lineno}: imports from a section are `from .<section> import ...`")
    stray = [n for n in ast.walk(ast.Module(body=body, type_ignores=[])) if isinstance(n, (ast.Import, ast.ImportFrom))]
    if stray:
        raise SectionError(f"{where}:{stray[0].lineno}: an import below the code (the imports come first)")
    code = "\n".join(source.split("\n")[last.end_lineno:]).strip("\n") + "\n"
    defines = top_level_names(ast.Module(body=body, type_ignores=[]))
    return Section(path.stem, doc.strip("\n"), frozenset(imports), frozenset(needs), code, frozenset(defines))


def _ordered(found: Dict[str, Section]) -> Dict[str, Section]:
    """The sections with every one after those it needs (ties by name): core first."""
    ordered: Dict[str, Section] = {}
    while len(ordered) < len(found):
        ready = sorted(name for name, s in found.items() if name not in ordered and s.needs <= ordered.keys())
        if not ready:
            stuck = sorted(set(found) - set(ordered))
            raise SectionError(f"the sections {', '.join(stuck)} need each other or a section that is not there")
        ordered[ready[0]] = found[ready[0]]
    return ordered


@lru_cache(maxsize=None)
def sections() -> Dict[str, Section]:
    """Every section by name, in the order the helper holds them."""
    found = {path.stem: read_section(path) for path in sorted(GLUE_DIR.glob("*.py"))}
    owner: Dict[str, str] = {}
    for section in found.values():
        for name in section.defines:
            if name in owner:
                raise SectionError(f"{name} is defined in both {owner[name]} and {section.name}")
            owner[name] = section.name
    return _ordered(found)


def with_needs(names: Iterable[str]) -> Tuple[str, ...]:
    """The sections ``names`` and all they need, in the helper's order (core always)."""
    found = sections()
    wanted = {"core", *names}
    todo = list(wanted)
    while todo:
        name = todo.pop()
        if name not in found:
            raise SectionError(f"no helper section {name!r} (there are {', '.join(found)})")
        for need in found[name].needs - wanted:
            wanted.add(need)
            todo.append(need)
    return tuple(name for name in found if name in wanted)


def defining(names: Iterable[str]) -> FrozenSet[str]:
    """The sections that define ``names`` (names no section defines select none: see ``unknown``)."""
    return frozenset(s.name for s in sections().values() if s.defines & set(names))


def unknown(names: Iterable[str]) -> Set[str]:
    """The names no section defines (in migrated code, a rule that calls what the helper lacks)."""
    known = set().union(*(s.defines for s in sections().values()))
    return set(names) - known
