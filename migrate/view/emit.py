"""Emitting a fused rewrite: the one place where a match becomes edits.

A fused rule matches a site in the dataflow view (``match(view) -> Match | Refusal``) and writes it
as source valid where a guard can run (``write(...) -> Written | Refusal``): the guard, the fused
call, the names the call's results bind (one or more: ``npu_add_rms_norm`` gives the norm and the
sum, the MoE gating kernels give weights, indices and scores), the statements the fused branch runs
after them, and the finding's message. This module turns a ``Written`` into edits:

* ``place``: a guarded region over statements of a block: ``if <guard>: <fused> else: <the
  original statements>`` (``migrate.guarded.region`` checks that the move keeps what the code
  computes), or, for a returned value, a fast path ``if <guard>: return <fused>`` in front of them;
* ``in_place``: an expression replaced by a helper call that checks its preconditions itself and
  runs the original computation when they fail (the gated MLP's ``npu_glue.swiglu_linear(...)``),
  the statements that only fed it folded into it;
* ``emit``: for a match that is one value (rotary, RMSNorm), the region over the statements of the
  root's block that compute it when there are several and the root is the whole value of ``name =
  <root>`` or ``return <root>`` (a binding the code reads afterwards is hoisted before the guard when
  cheap), else a guarded expression in place of the root, ``(<fused> if <guard> else <root>)``.

The rule writes the guard and the fused call from operand source valid where the guard runs
(``operand_text``: a name, an attribute chain, or a cheap view of them).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence, Tuple, Union

import libcst as cst

from ..edits import SITE, Code, ImportSpec, Replace, Splice, template
from ..guarded import guarded_expression, region
from ..refusal import Refusal, RefusalKind, unplaced
from .regions import VIEW_METHODS, Slice, enclosing_block, operand_code, slice_of
from .syntax import code


@dataclass(frozen=True)
class Written:
    """A match written where its guard runs. ``outputs``: the names the call's results bind, in the
    call's order, "" for a result the code does not keep; () when the call's value stands where the
    original's was (returned, or in place of an expression). ``after``: fused-branch statements
    after the binding (a cast back to the original's dtype, a name set to None). ``holes``: the
    template holes (``edits.template``) that ``guard``, ``call`` and ``after`` use."""

    guard: str
    call: str
    message: str
    outputs: Tuple[str, ...] = ()
    after: Tuple[Union[str, Code], ...] = ()
    holes: Tuple[Tuple[str, cst.CSTNode], ...] = ()
    imports: Tuple[ImportSpec, ...] = ()

    def binding(self, returned: bool) -> str:
        """The fused branch's first statement: ``return <call>``, ``name = <call>``, ``a, b = <call>``
        (``_`` for a result not kept), or ``name = <call>[0]`` when only the first result is kept."""
        if returned:
            return f"return {self.call}\n"
        kept = list(self.outputs)
        while len(kept) > 1 and not kept[-1]:
            kept.pop()
        if len(kept) == 1:
            return f"{kept[0]} = {self.call}{'[0]' if len(self.outputs) > 1 else ''}\n"
        return f"{', '.join(o or '_' for o in self.outputs)} = {self.call}\n"

    def fused(self, returned: bool) -> list:
        holes = dict(self.holes)
        return [template(self.binding(returned), **holes)] + \
            [s if isinstance(s, Code) else template(s, **holes) for s in self.after]


def place(rule, scope: cst.CSTNode, piece: Slice, written: Written, *, note: Optional[str], target: str,
          api: Optional[str] = None, helpers: Sequence[str] = (), imports: Sequence[ImportSpec] = (),
          anchor: Optional[cst.CSTNode] = None, returned: bool = False, tail: Sequence[Code] = (),
          replaced: Optional[cst.CSTNode] = None, also: Sequence = (), taken: Optional[list] = None) -> Optional[Refusal]:
    """Rewrite ``piece`` (statements of a block in ``scope``, the function's body) as a guarded region
    running ``written``; None when done, else why the move would change what the code computes.
    ``returned``: the fused branch returns the call's value and falls through to the original
    statements otherwise (a fast path); ``tail``: statements that end the fallback branch;
    ``replaced``: an expression after the region that ``also`` (further edits of the site) replaces;
    ``anchor``: where the finding points (the region's first statement by default); ``taken``: the
    statement ranges of regions emitted before, to which this one is added."""
    fused = written.fused(returned)
    fallthrough = returned or bool(fused) and fused[-1].text.startswith("return ")
    edit = region(scope, piece.block, piece.start, piece.end, template(written.guard, **dict(written.holes)), fused,
                  note=note, hoisted=piece.hoisted, unit=rule.ctx.indentation(piece.block)[1],
                  fallthrough=fallthrough, at_entry=True, tail=tail, replaced=replaced)
    if isinstance(edit, Refusal):
        return edit
    if taken is not None:
        taken.append((piece.block, piece.start, piece.end))
    rule.rewrite(anchor if anchor is not None else piece.block.body[piece.start], written.message, target=target,
                 api=api, edits=[edit, *also], imports=[*imports, *written.imports], helpers=helpers)
    return None


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
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in VIEW_METHODS:
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


def in_place(rule, node: cst.BaseExpression, written: Written, *, target: str, helpers: Sequence[str] = (),
             folded: Optional[Tuple[cst.CSTNode, int, int]] = None) -> None:
    """Replace ``node`` by ``written.call`` (a self-guarding helper call; ``written.guard`` is unused);
    ``folded``: (block, start, end), statements before ``node``'s that only compute its operands, which
    the call computes now, removed."""
    edits = [Replace(node, template(written.call, **dict(written.holes)))]
    if folded is not None:
        edits.append(Splice(*folded))
    rule.rewrite(node, written.message, target=target, edits=edits, imports=written.imports, helpers=helpers)


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
         taken: Optional[list] = None) -> Optional[Refusal]:
    """Rewrite ``root`` (a value of ``view``) as a guarded fused call; None when done, else why not.
    ``write(piece)`` gives the ``Written`` match (its ``outputs`` left empty: the root's own binding is
    used) for operands written where ``piece``'s guard runs, or why they cannot be written there. ``fast_path``: a returned root
    gets ``if <guard>: return <fused>`` in front of its statements even when it has only one.
    ``anchor``: where the finding points (the root by default). ``taken``: the statement ranges
    (block, start, end) of regions the rule emitted before; a region that would intersect one is not
    tried (the engine would refuse the second), and a new one is added to the list."""
    parents = rule.ctx.tree.parents()
    piece = slice_of(view, root, operands, parents)
    whole = whole_value(root.node, parents)
    attempts = []
    several = not isinstance(piece, Refusal) and (piece.end - piece.start > 1 or fast_path and whole == "return")
    if several and whole is not None and not _intersects(piece, taken or ()):
        attempts.append(piece)  # the computation has statements of its own: a region moves them
    block, index = enclosing_block(root.node, parents)
    at_root = Slice(view, block, index, index + 1, ()) if block is not None else None
    if at_root is not None:
        attempts.append(at_root)
    why = piece if isinstance(piece, Refusal) else None
    for where in attempts:
        written = write(where)
        if isinstance(written, Refusal):
            why = why or written
            continue
        if where is at_root:
            edit = guarded_expression(root.node, written.guard, written.call, parenthesize=whole is None)
            rule.rewrite(anchor or root.node, written.message, target=target, api=api, edits=[edit],
                         imports=[*imports, *written.imports], helpers=helpers)
            return None
        if whole == "assign":
            statement = parents.get(id(root.node))
            bound = statement.targets[0].target if isinstance(statement, cst.Assign) else statement.target
            written = replace(written, outputs=(code(bound),))
        problem = place(rule, view.func.body, where, written, note=note, target=target, api=api, helpers=helpers,
                        imports=imports, anchor=anchor or root.node, returned=whole == "return", taken=taken)
        if problem is None:
            return None
        hoisted = _hoistable(view, where, problem)
        if hoisted is not None:  # a cheap binding the code reads afterwards: run it before the guard
            attempts.insert(attempts.index(where) + 1, hoisted)
        why = problem
    return why or unplaced("the computation is not available where a guard could run")


def _hoistable(view, piece: Slice, problem: Refusal) -> Optional[Slice]:
    """``piece`` with the statement that binds a name read after the region hoisted before the guard,
    when that statement is ``name = <cheap expression>`` (``input_dtype = x.dtype``), else None."""
    if problem.kind is not RefusalKind.READ_AFTER_ORIGINAL_ONLY:
        return None
    for index in range(piece.start, piece.end - 1):
        stmt = piece.block.body[index]
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name) \
                and small.targets[0].target.value == problem.name and cheap(small.value) and index not in piece.hoisted:
            return Slice(view, piece.block, piece.start, piece.end, tuple(sorted((*piece.hoisted, index))))
    return None


def _intersects(piece: Slice, taken) -> bool:
    return any(block is piece.block and max(start, piece.start) < min(end, piece.end) for block, start, end in taken)
