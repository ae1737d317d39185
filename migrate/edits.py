"""The edits a rule emits: plain data that the engine owns, checks and applies.

A rule never changes the tree. It describes a change in terms of the ORIGINAL nodes of the file,
and the engine applies every edit of the file in one bottom-up pass (``migrate.apply``). New code
is a ``Code``: source text whose ``{name}`` holes each stand for an original node; the engine fills
a hole with that node *as migrated* (every edit inside it applied), so an edit that wraps, moves or
rebuilds code never loses an edit made inside it. Three kinds of edit:

* ``Replace(node, new)``: the node becomes ``new`` (a ``Code``, or a node built by the rule when
  nothing inside the old node can have been edited: a name, a string, an import);
* ``Splice(block, start, end, new)``: the statements ``start:end`` of a block (an indented block or
  the module) become the statements ``new`` (none: removal; ``start == end``: insertion); comments
  above removed statements move to the statement that follows;
* ``Guarded(...)``: a guarded region, ``if <guard>: <fused> else: <the original statements>``, the
  form of every fused rewrite of statements (``migrate.guarded`` builds it and checks its
  definitions and uses).

A ``Site`` is one finding and the edits that make it true: the engine applies all of a site's edits
or none of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence, Tuple, Union

import libcst as cst

from npu_migrate.migrate.findings import Finding


@dataclass(frozen=True)
class ImportSpec:
    """An import a rewrite needs: ``import module`` or ``from module import obj [as asname]``;
    ``beside``: ``module`` is a file vendored beside the migrated file (``migrate.imports`` writes
    the import that finds it in every layout)."""

    module: str
    obj: Optional[str] = None
    asname: Optional[str] = None
    beside: bool = False


@dataclass(frozen=True, eq=False)
class Code:
    """Source text with ``{name}`` holes; each hole is filled with the migrated form of its node.

    A hole may name the replaced node itself (a wrapper: ``(fused if guard else {orig})``). Holes
    are substituted as whole nodes, so a rule puts them where no parentheses are needed (call
    arguments, branches of a conditional expression, the right-hand side of an assignment).
    """

    text: str
    holes: Tuple[Tuple[str, cst.CSTNode], ...] = ()

    @property
    def hole_nodes(self) -> Tuple[cst.CSTNode, ...]:
        return tuple(node for _, node in self.holes)


def code(text: str, **holes: cst.CSTNode) -> Code:
    return Code(text, tuple(holes.items()))


#: Where a rule's template puts its site (``npu_glue.can_fuse(q, k, v, site=SITE)``): a placeholder
#: name the engine replaces, once the finding has its position, with the constant ``"path:line:CODE"``
#: (the file as given to ``migrate``, the finding's 1-based line and code). The vendored helper counts
#: per site the calls that ran the fused kernel and, per fallback, the first precondition that failed;
#: ``migrate parity`` joins those counts to the sites by that constant.
SITE = "__npu_site__"


def site_constant(path: str, line: int, diagnostic: str) -> str:
    """The Python literal of a site: ``"models/llama.py:42:NPU302"``."""
    return json.dumps(f"{path}:{line}:{diagnostic}")  # a JSON string is a Python string literal


Block = Union[cst.IndentedBlock, cst.Module]


@dataclass(frozen=True, eq=False)
class Replace:
    """``node`` becomes ``new``. ``holes_see_original``: another edit's hole that names ``node``
    gets it as migrated *without* this replacement (a value moved into a temporary: the fallback
    computes ``tmp = <node>``, the statement reads ``tmp``)."""

    node: cst.CSTNode
    new: Union[Code, cst.CSTNode]
    holes_see_original: bool = False


@dataclass(frozen=True, eq=False)
class Splice:
    block: Block
    start: int
    end: int
    new: Tuple[Code, ...] = ()


@dataclass(frozen=True, eq=False)
class Guarded:
    """``if guard: fused`` in place of the statements ``start:end`` of ``block``, which become the
    ``else`` branch (``fallthrough``: they stay after the ``if``, whose fused branch returns).
    ``hoisted`` statements of the range run before the ``if`` (on both paths); ``note`` is a
    comment above it; ``unit`` the indentation step of the new blocks (None: the module's);
    ``tail`` statements end the ``else`` branch (``tmp = <the original value>`` when the fused value
    is used inside a larger expression of the statement after the region)."""

    block: Block
    start: int
    end: int
    guard: Code
    fused: Tuple[Code, ...]
    note: Optional[str] = None
    hoisted: Tuple[int, ...] = ()
    fallthrough: bool = False
    unit: Optional[str] = None
    tail: Tuple[Code, ...] = ()

    @property
    def moved(self) -> Tuple[int, ...]:
        """Indices of the statements that go into the ``else`` branch (or after the ``if``)."""
        return tuple(i for i in range(self.start, self.end) if i not in self.hoisted)


Edit = Union[Replace, Splice, Guarded]


def edit_codes(edit: Edit) -> Tuple[Code, ...]:
    """The new code of ``edit`` (whose holes name the original nodes it keeps)."""
    if isinstance(edit, Replace):
        return (edit.new,) if isinstance(edit.new, Code) else ()
    if isinstance(edit, Splice):
        return tuple(edit.new)
    return (edit.guard, *edit.fused, *edit.tail)


def placed_at(edit: Edit, constant: str) -> Edit:
    """``edit`` with every ``SITE`` placeholder of its new code replaced by ``constant``."""
    def fix(c):
        return Code(c.text.replace(SITE, constant), c.holes) if isinstance(c, Code) and SITE in c.text else c

    if not any(SITE in c.text for c in edit_codes(edit)):
        return edit
    if isinstance(edit, Replace):
        return replace(edit, new=fix(edit.new))
    if isinstance(edit, Splice):
        return replace(edit, new=tuple(map(fix, edit.new)))
    return replace(edit, guard=fix(edit.guard), fused=tuple(map(fix, edit.fused)), tail=tuple(map(fix, edit.tail)))


def statements(block: Block) -> Sequence[cst.BaseStatement]:
    return block.body


@dataclass(eq=False)
class Site:
    """One finding and the edits that make it true (none for a reported site)."""

    anchor: cst.CSTNode  # the node the finding's line and column point at
    finding: Finding
    edits: Tuple[Edit, ...] = ()
    imports: Tuple[ImportSpec, ...] = ()
    helpers: Tuple[str, ...] = ()
    results: list = field(default_factory=list)  # nodes the engine produced for the edits (checked in the output)
