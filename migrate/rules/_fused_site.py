"""Emitting a fused rewrite for a match in the dataflow view (shared by the rotary and RMSNorm rules).

A match is a root value (what the fused kernel computes) and its operands. Two forms are tried:

* a guarded region over the statements of the root's block that compute it (``_regions.slice_of``),
  when there are several and the root is the whole value of ``name = <root>`` or ``return <root>``:
  ``if <guard>: name = <fused>`` (or ``return <fused>``, a fast path in front of the original
  statements) ``else: <the original statements>``, so the fused path does not compute what the
  kernel replaces; ``migrate.guarded.region`` checks that the move is sound;
* a guarded expression in place of the root, ``(<fused> if <guard> else <root>)``.

The rule writes the guard and the fused call from operand source valid where the guard runs
(``operand_text``: a name, an attribute chain, or a cheap view of them).
"""

from __future__ import annotations

import re
from typing import Callable, Optional, Sequence, Union

import libcst as cst

from npu_migrate.migrate.edits import SITE, code as template
from npu_migrate.migrate.guarded import guarded_expression, region
from npu_migrate.migrate.rules._regions import Slice, enclosing_block, operand_code, slice_of
from npu_migrate.migrate.rules._syntax import code

#: methods that return a view (cheap to evaluate twice, no effects)
CHEAP_METHODS = {"unsqueeze", "squeeze", "transpose", "permute", "view", "expand", "expand_as", "unflatten"}

Written = Union[tuple, str]  # (guard, fused call, message[, imports the texts need]) or why not


def sited(call: str, when: Sequence[str] = ()) -> str:
    """The helper check ``call`` (``npu_glue.<check>(...)`` source) given the site's own run-time
    conditions (``when``: source of flags the fused path also needs, evaluated with the check) and
    the site, so that the check counts each call at its site as fused or fallen back, and why
    (the engine writes the site's constant in place of ``SITE``)."""
    extra = ([f"when={' and '.join(when)}"] if when else []) + [f"site={SITE}"]
    return f"{call[:-1]}, {', '.join(extra)})"


def cheap(node: cst.CSTNode, index: bool = False) -> bool:
    """An expression that is a view of names (evaluating it twice costs nothing and does nothing):
    names, attributes, constant subscripts and slices, view methods. Subscripts by a name are not
    (``cos[position_ids]`` gathers)."""
    if isinstance(node, (cst.Integer, cst.Float, cst.Ellipsis, cst.SimpleString)):
        return True
    if isinstance(node, cst.Name):
        return not index or node.value == "None"
    if isinstance(node, cst.Attribute):
        return cheap(node.value)
    if isinstance(node, cst.UnaryOperation):
        return cheap(node.expression, index)
    if isinstance(node, cst.BinaryOperation):
        return not index and cheap(node.left) and cheap(node.right)
    if isinstance(node, cst.Subscript):
        return cheap(node.value) and all(
            cheap(e.slice.value, index=True) if isinstance(e.slice, cst.Index)
            else all(b is None or cheap(b) for b in (e.slice.lower, e.slice.upper, e.slice.step)) for e in node.slice)
    if isinstance(node, (cst.Tuple, cst.List)):
        return not index and all(not isinstance(e, cst.StarredElement) and cheap(e.value) for e in node.elements)
    if isinstance(node, cst.IfExp):
        return cheap(node.test) and cheap(node.body) and cheap(node.orelse)
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in CHEAP_METHODS:
        return cheap(node.func.value) and all(not a.star and cheap(a.value) for a in node.args)
    return False


def operand_text(piece: Slice, value) -> Optional[str]:
    """Source for ``value`` valid where ``piece``'s guard runs and cheap to evaluate twice (an atom,
    as ``operand_code`` gives), or None."""
    text = operand_code(piece, value)
    if text is None or text.isidentifier():
        return text
    try:
        node = cst.parse_expression(text)
    except cst.ParserSyntaxError:
        return None
    return text if cheap(node) else None


def whole_value(node: cst.CSTNode, parents) -> Optional[str]:
    """'assign' (``name = <node>``), 'return' (``return <node>``), or None inside a larger expression."""
    parent = parents.get(id(node))
    if isinstance(parent, cst.Assign) and parent.value is node and len(parent.targets) == 1 \
            and isinstance(parent.targets[0].target, cst.Name):
        return "assign"
    if isinstance(parent, cst.AnnAssign) and parent.value is node and isinstance(parent.target, cst.Name):
        return "assign"
    if isinstance(parent, cst.Return) and parent.value is node:
        return "return"
    return None


def emit(rule, view, root, operands: Sequence, write: Callable[[Slice], Written], *, note: str, target: str,
         api: Optional[str], imports=(), helpers=(), fast_path: bool = False, anchor=None,
         taken: Optional[list] = None) -> Optional[str]:
    """Rewrite ``root`` (a value of ``view``) as a guarded fused call; None when done, else why not.
    ``write(piece)`` gives the guard, the fused call and the finding's message for operands written
    where ``piece``'s guard runs, or why they cannot be written there. ``fast_path``: a returned root
    gets ``if <guard>: return <fused>`` in front of its statements even when it has only one.
    ``anchor``: where the finding points (the root by default). ``taken``: the statement ranges
    (block, start, end) of regions the rule emitted before; a region that would intersect one is not
    tried (the engine would refuse the second), and a new one is added to the list."""
    parents = rule.ctx.tree.parents()
    piece = slice_of(view, root, operands, parents)
    whole = whole_value(root.node, parents)
    attempts = []
    several = not isinstance(piece, str) and (piece.end - piece.start > 1 or fast_path and whole == "return")
    if several and whole is not None and not _intersects(piece, taken or ()):
        attempts.append(piece)  # the computation has statements of its own: a region moves them
    block, index = enclosing_block(root.node, parents)
    at_root = Slice(view, block, index, index + 1, ()) if block is not None else None
    if at_root is not None:
        attempts.append(at_root)
    why = piece if isinstance(piece, str) else None
    for where in attempts:
        written = write(where)
        if isinstance(written, str):
            why = why or written
            continue
        guard, fused, message, *needs = written
        if where is at_root:
            edit = guarded_expression(root.node, guard, fused, parenthesize=whole is None)
        else:
            edit = _region(rule, view, where, root, whole, guard, fused, note, parents)
            hoisted = _hoistable(view, where, edit) if isinstance(edit, str) else None
            if hoisted is not None:  # a cheap binding the code reads afterwards: run it before the guard
                attempts.insert(attempts.index(where) + 1, hoisted)
            if isinstance(edit, str):
                why = edit
                continue
            if taken is not None:
                taken.append((where.block, where.start, where.end))
        rule.rewrite(anchor or root.node, message, target=target, api=api, edits=[edit],
                     imports=[*imports, *(needs[0] if needs else ())], helpers=helpers)
        return None
    return why or "the computation is not available where a guard could run"


READ_AFTER = re.compile(r"`(\w+)` is read after the region but only the original branch defines it")


def _hoistable(view, piece: Slice, problem: str) -> Optional[Slice]:
    """``piece`` with the statement that binds a name read after the region hoisted before the guard,
    when that statement is ``name = <cheap expression>`` (``input_dtype = x.dtype``), else None."""
    found = READ_AFTER.search(problem)
    if found is None:
        return None
    for index in range(piece.start, piece.end - 1):
        stmt = piece.block.body[index]
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name) \
                and small.targets[0].target.value == found.group(1) and cheap(small.value) and index not in piece.hoisted:
            return Slice(view, piece.block, piece.start, piece.end, tuple(sorted((*piece.hoisted, index))))
    return None


def _intersects(piece: Slice, taken) -> bool:
    return any(block is piece.block and max(start, piece.start) < min(end, piece.end) for block, start, end in taken)


def _region(rule, view, piece: Slice, root, whole: str, guard: str, fused: str, note: str, parents):
    statement = parents.get(id(root.node))
    if whole == "return":
        fused_statement = f"return {fused}\n"
    else:
        target = statement.targets[0].target if isinstance(statement, cst.Assign) else statement.target
        fused_statement = f"{code(target)} = {fused}\n"
    _, unit = rule.ctx.indentation(piece.block)
    return region(view.func.body, piece.block, piece.start, piece.end, template(guard), [template(fused_statement)],
                  note=note, hoisted=piece.hoisted, unit=unit, fallthrough=whole == "return", at_entry=True)
