"""Building new code from edits: filling ``Code`` holes, and the one builder of guarded code.

Every fused rewrite takes one of two guarded forms, built here and nowhere else:

* a guarded region of statements (``Guarded``)::

      # npu-migrate NPU302: <note>
      if <guard>:
          <fused statements>
      else:
          <the original statements, as migrated>

  or, when the fused statements return (``fallthrough``), the ``if`` alone in front of the
  original statements;
* a guarded expression: ``(<fused> if <guard> else <the original expression>)``.

``region`` is what a rule calls to propose a guarded region: it checks the definitions and uses of
the moved statements (``migrate.defuse``) and returns the edit, or the reason it would not be sound.
"""

from __future__ import annotations

import re
from typing import Callable, List, Mapping, Optional, Sequence, Union

import libcst as cst

from .defuse import defined, read, region_problem
from .edits import Code, Guarded, Replace, template
from .parens import settle
from .refusal import Refusal

HOLE = re.compile(r"\{(\w+)\}")
Migrated = Callable[[cst.CSTNode], cst.CSTNode]  # an original node -> the node as migrated


def _placeholder(name: str) -> str:
    return f"__npu_hole_{name}__"


def _text(source: Code) -> str:
    names = {name for name, _ in source.holes}
    return HOLE.sub(lambda m: _placeholder(m.group(1)) if m.group(1) in names else m.group(0), source.text)


def fill(source: Code, kind: str, migrated: Migrated,
         wrapped: Optional[Callable[[cst.CSTNode, cst.CSTNode], None]] = None) -> cst.CSTNode:
    """The node ``source`` describes (``kind``: "expression" or "statement"), every hole holding
    the migrated form of its node (the same node object, so edits inside it stay visible, unless it
    needs parentheses where it lands: ``wrapped(node, parenthesised)`` is then told), and every
    piece of it parenthesised where its context needs it (``migrate.parens``)."""
    text = _text(source)
    node = cst.parse_expression(text) if kind == "expression" else cst.parse_statement(text)
    return settle(node, kind, {_placeholder(name): migrated(hole) for name, hole in source.holes}, wrapped)


def parsed(source: Code, kind: str) -> cst.CSTNode:
    """``source`` parsed with its holes left as placeholder names (for reading its names)."""
    text = _text(source)
    return cst.parse_expression(text) if kind == "expression" else cst.parse_statement(text)


# -- guarded regions ----------------------------------------------------------------------------
def build_region(edit: Guarded, migrated: Migrated, wrapped=None) -> List[cst.BaseStatement]:
    """The statements that replace ``edit.block.body[edit.start:edit.end]`` (``wrapped``: as for
    ``fill``)."""
    body = edit.block.body
    hoisted = [migrated(body[i]) for i in edit.hoisted]
    moved = [migrated(body[i]) for i in edit.moved]
    block = lambda stmts: cst.IndentedBlock(body=stmts, indent=edit.unit)  # noqa: E731
    fused = [fill(part, "statement", migrated, wrapped) for part in edit.fused]
    note = [cst.EmptyLine(comment=cst.Comment(f"# {edit.note}"))] if edit.note else []
    test = fill(edit.guard, "expression", migrated, wrapped)
    if edit.fallthrough:  # a fast path in front of the original statements, which keep their lines
        return [*hoisted, cst.If(test=test, body=block(fused), leading_lines=note), *moved]
    lines = [*moved[0].leading_lines, *note]  # the comments above the region stay above it
    moved[0] = moved[0].with_changes(leading_lines=[])
    moved += [fill(part, "statement", migrated, wrapped) for part in edit.tail]
    return [*hoisted, cst.If(test=test, body=block(fused), orelse=cst.Else(body=block(moved)), leading_lines=lines)]


def _reads(sources: Sequence[Code], kind: str) -> tuple:
    """(names the sources read before binding them, names they bind), in statement order; a
    hole reads what its original node reads."""
    reads, defines = set(), set()
    for source in sources:
        node = parsed(source, kind)
        placeholders = {_placeholder(name) for name, _ in source.holes}
        reads |= ((read([node]) - placeholders) | read(source.hole_nodes)) - defines
        defines |= defined([node]) if kind == "statement" else set()
    return reads, defines


def region(scope: cst.CSTNode, block, start: int, end: int, guard: Code, fused: Sequence[Code], *,
           note: Optional[str] = None, hoisted: Sequence[int] = (), fallthrough: bool = False,
           unit: Optional[str] = None, reads_at: Optional[Mapping[str, int]] = None,
           at_entry: bool = False, tail: Sequence[Code] = (),
           replaced: Optional[cst.CSTNode] = None) -> Union[Guarded, Refusal]:
    """A guarded region over ``block.body[start:end]`` inside ``scope`` (the function body or the
    module), or why it would not compute what the original does. ``reads_at`` says, for names the
    fused code reads, at which statement of the block the original computation reads the value the
    fused code stands for (unlisted names: anywhere in the region, the strictest reading);
    ``at_entry``: the rule proved that every name stands for its value on entry to the region;
    ``tail``: statements that end the fallback branch (what they bind counts as the original's);
    ``replaced``: an expression after the region that another edit of the site replaces."""
    guard_reads, _ = _reads([guard], "expression")
    fused_reads, defines = _reads(fused, "statement")
    reads = guard_reads | fused_reads
    if at_entry:
        reads_at = dict.fromkeys(reads, start)
    _, tail_defines = _reads(tail, "statement")
    problem = region_problem(scope, block, start, end, hoisted, reads, defines,
                             fused_returns=fallthrough, reads_at=reads_at or {}, fallback_defines=tail_defines,
                             replaced=replaced)
    if problem is not None:
        return problem
    return Guarded(block, start, end, guard, tuple(fused), note, tuple(hoisted), fallthrough, unit, tuple(tail))


# -- guarded expressions ------------------------------------------------------------------------
def guarded_expression(node: cst.BaseExpression, guard: str, fused: str, *, parenthesize: bool = True) -> Replace:
    """``(fused if guard else <node as migrated>)``: ``guard`` and ``fused`` are source text that
    reads only names and attributes (they are evaluated in place of the original expression).
    ``parenthesize``: the parentheses that make it read as one value inside a larger expression
    (without them, it is still parenthesised where its place needs it: ``migrate.parens.landing``)."""
    text = f"{fused} if {guard} else {{orig}}"
    return Replace(node, template(f"({text})" if parenthesize else text, orig=node))
