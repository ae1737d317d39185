"""Parentheses where an expression lands, so that generated code means what its template says.

New code is source text with pieces put into it: a ``Code`` hole filled with a migrated node, an
operand's source pasted into a rule's guard or fused call, a rewritten node put where the original
node was. Whether a piece needs parentheses depends on where it lands: ``q / math.sqrt(d)`` is
fine as a call argument and wrong before ``.shape`` (``q / math.sqrt(d).shape[1]`` divides by a
shape). The authority on what a text means is CPython's parser (``ast``, the parser that runs the
code; libcst keeps no precedence table of its own): a piece is left bare where the code with it bare
reads as the same tree as with it parenthesised, and parenthesised everywhere else.

* ``atom(text)``: source that may be pasted anywhere an operand goes (parenthesised unless it is a
  primary: a name, attribute, call, subscript, display or string). Every operand text a rule pastes
  into a template passes through it; ``settle`` then drops the parentheses its context does not need.
* ``settle(template, kind, values)``: the template (parsed with placeholder names) with each
  placeholder replaced by its node, parenthesised only where needed; a pair of parentheses of the
  template's own is dropped where it changes nothing, one pair per expression (the pair ``atom``
  added; a rule that parenthesises on purpose writes its own pair around it).
* ``landing(node, new, parents)``: ``new`` as it may stand where ``node`` stands in the file.
"""

from __future__ import annotations

import ast
from typing import Callable, Dict, Mapping, Optional

import libcst as cst

from npu_migrate.migrate.codegen import code as _code
from npu_migrate.migrate.tree import walk

_EMPTY = cst.Module(body=[])

#: expressions that never need parentheses around them (Python's primaries and displays)
PRIMARY = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.List, cst.Dict, cst.Set, cst.ListComp,
           cst.SetComp, cst.DictComp, cst.SimpleString, cst.FormattedString, cst.Ellipsis)


class CodegenError(ValueError):
    """A template puts a piece where Python does not accept it, parenthesised or not."""


def is_atom(node: cst.CSTNode) -> bool:
    """``node`` reads as itself wherever an expression may stand (numbers are not: ``1.real``)."""
    if getattr(node, "lpar", None):
        return True
    return isinstance(node, PRIMARY)


def parenthesized(node: cst.BaseExpression) -> cst.BaseExpression:
    return node if is_atom(node) else node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def bare(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.with_changes(lpar=[], rpar=[]) if getattr(node, "lpar", None) else node


def atom(text: str) -> str:
    """``text`` (an expression's source) as it may be pasted anywhere an operand goes."""
    if text.replace(".", "_").isidentifier():
        return text
    try:
        node = cst.parse_expression(text)
    except (cst.ParserSyntaxError, ValueError):
        return f"({text})"
    return text if is_atom(node) else f"({text})"


def meaning(node: cst.CSTNode, kind: str) -> Optional[str]:
    """The tree CPython reads from ``node``'s code (``ast.dump``, blind to parentheses and layout),
    or None when the code does not parse."""
    text = _code(_EMPTY, node)
    try:
        return ast.dump(ast.parse(text, mode="eval" if kind == "expression" else "exec"))
    except SyntaxError:
        return None


# -- holes --------------------------------------------------------------------------------------
class _Put(cst.CSTTransformer):
    """The template with each placeholder replaced by its node: parenthesised unless its id is in
    ``bare``; a template node whose id is in ``bare`` loses its own parentheses."""

    def __init__(self, values: Mapping[str, cst.CSTNode], bare_ids) -> None:
        super().__init__()
        self.values = values
        self.bare = bare_ids
        self.put: Dict[int, cst.CSTNode] = {}  # id(placeholder) -> what it became

    def leave_Name(self, original, updated):
        value = self.values.get(original.value)
        if value is None:
            return updated
        if isinstance(value, cst.BaseExpression) and id(original) not in self.bare and not isinstance(
                value, cst.StarredElement):
            value = parenthesized(value)
        self.put[id(original)] = value
        return value

    def leave_Arg(self, original, updated):  # a starred piece in an argument: ``f(*xs)``
        if isinstance(updated.value, cst.StarredElement) and not updated.star:
            return updated.with_changes(star="*", value=updated.value.value)
        return updated

    def leave_Element(self, original, updated):  # a starred piece in a display: ``[*xs]``
        if isinstance(updated.value, cst.StarredElement):
            return updated.value.with_changes(comma=updated.comma)
        return updated

    def on_leave(self, original, updated):
        updated = super().on_leave(original, updated)
        if id(original) in self.bare and id(original) not in self.put:  # one pair less
            return updated.with_changes(lpar=updated.lpar[:-1], rpar=updated.rpar[1:])
        return updated


def _own_parens(node: cst.CSTNode) -> bool:
    """A parenthesised expression whose parentheses hold no line break (those lay the code out)."""
    lpar = getattr(node, "lpar", None)
    return bool(lpar) and isinstance(node, cst.BaseExpression) and not any(
        isinstance(p.whitespace_after, cst.ParenthesizedWhitespace) for p in lpar) and not any(
        isinstance(p.whitespace_before, cst.ParenthesizedWhitespace) for p in node.rpar)


def settle(template: cst.CSTNode, kind: str, values: Mapping[str, cst.CSTNode],
           wrapped: Optional[Callable[[cst.CSTNode, cst.CSTNode], None]] = None) -> cst.CSTNode:
    """``template`` (parsed from text whose placeholders are the keys of ``values``) with every
    placeholder replaced by its node, each piece parenthesised only where its context needs it.
    ``wrapped(node, parenthesised)`` is told of each node put in with parentheses added."""
    nodes = walk(template)
    placeholders = [n for n in nodes if isinstance(n, cst.Name) and n.value in values]
    candidates = [n for n in placeholders if isinstance(values[n.value], cst.BaseExpression)
                  and not isinstance(values[n.value], cst.StarredElement) and not is_atom(values[n.value])]
    candidates += [n for n in nodes[1:] if _own_parens(n)]  # the root's belong to where the template lands
    if not placeholders and not candidates:
        return template
    chosen: set = set()
    put = _Put(values, chosen)
    tree = template.visit(put)
    if candidates:
        want = meaning(tree, kind)
        if want is None:
            raise CodegenError(f"the generated code does not parse: {_code(_EMPTY, tree)!r}")
        for candidate in candidates:
            trial_put = _Put(values, chosen | {id(candidate)})
            trial = template.visit(trial_put)
            if meaning(trial, kind) == want:
                chosen.add(id(candidate))
                tree, put = trial, trial_put
    if wrapped is not None:
        for placeholder in placeholders:
            value, became = values[placeholder.value], put.put.get(id(placeholder))
            if became is not None and became is not value:
                wrapped(value, became)
    return tree


# -- where a rewritten node lands in the file -----------------------------------------------------
_SUITE = cst.IndentedBlock(body=[cst.SimpleStatementLine(body=[cst.Pass()])])


class _Put1(cst.CSTTransformer):
    """A statement with ``node`` replaced by ``new`` and every suite by ``pass`` (its headers)."""

    def __init__(self, node: cst.CSTNode, new: cst.CSTNode) -> None:
        super().__init__()
        self.node, self.new = node, new

    def on_visit(self, node) -> bool:
        return node is not self.node and not isinstance(node, (cst.IndentedBlock, cst.SimpleStatementSuite))

    def on_leave(self, original, updated):
        if original is self.node:
            return self.new
        if isinstance(original, (cst.IndentedBlock, cst.SimpleStatementSuite)):
            return _SUITE
        return updated


def landing(node: cst.CSTNode, new: cst.BaseExpression, parents: Mapping[int, cst.CSTNode]) -> cst.BaseExpression:
    """``new`` (an expression put where ``node`` is) parenthesised when its place needs it: read
    in the statement around ``node`` (its headers only, for a compound statement)."""
    if is_atom(new):
        return new
    context = parents.get(id(node))
    while context is not None and not isinstance(context, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        context = parents.get(id(context))
    kept = parenthesized(new)
    if context is None:
        return kept
    want = meaning(context.visit(_Put1(node, kept)), "statement")
    return new if want is not None and meaning(context.visit(_Put1(node, new)), "statement") == want else kept
