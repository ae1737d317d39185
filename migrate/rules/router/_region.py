"""From a router matched on the view back to source: the statements of one block that compute it
(values of inlined helpers count at their call), the names its outputs have after them, and a
last statement that computes more from the weights (``w = softmax(...).type_as(x)``, ``return w / s,
i``) rewritten around the kernel's output."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Union

import libcst as cst

from ...edits import template
from ...refusal import Refusal, unplaced
from ...view.regions import Slice, interior, operand_code
from ...view.syntax import code
from ...view.ops import Op

TEMP = "_npu_weights"  # the kernel's weights when the original computes more from them in the same statement


def named(piece: Slice, value) -> Optional[str]:
    """The logits as written where the guard runs, casts left out where they are not named (the
    guard reads only shapes and dtypes, so it need not copy them)."""
    text = operand_code(piece, value)
    while text is None and value.op == Op.CAST:
        value = value.input
        text = operand_code(piece, value)
    return text


def branching(r, piece: Slice) -> Optional[Refusal]:
    """Why the region holds a compound statement the fused code would replace wrongly: only
    ``if <flag>:`` around the renormalisation may be in it (the flag joins the guard)."""
    flags = {id(flag.node) for flag in r.flags if flag.node is not None}
    for index in range(piece.start, piece.end):
        stmt = piece.block.body[index]
        if index in piece.hoisted or isinstance(stmt, cst.SimpleStatementLine):
            continue
        if not (isinstance(stmt, cst.If) and stmt.orelse is None and id(stmt.test) in flags):
            return unplaced("part of the router is computed inside a branch or loop (if/for/with)")
    return None


# -- where the router is ---------------------------------------------------------------------------
def home_node(view, value, parents) -> Optional[cst.CSTNode]:
    """The node of this function that computes ``value``: its own, or for a value of an inlined helper
    the call of that helper."""
    if value.node is None:
        return None
    if value.view is view:
        return value.node
    caller = getattr(value.view, "caller", None)
    node = caller
    while node is not None and node is not view.func:
        node = parents.get(id(node))
    return caller if node is view.func else None


def _blocks(node, parents) -> List[tuple]:
    """(block, index of the statement holding ``node``) from the innermost block out."""
    found = []
    child, parent = node, parents.get(id(node))
    while parent is not None:
        if isinstance(parent, (cst.IndentedBlock, cst.Module)):
            found.append((parent, list(parent.body).index(child)))
        child, parent = parent, parents.get(id(parent))
    return found


def router_slice(view, roots: Sequence, operands: Sequence, parents) -> Union[Slice, Refusal]:
    """The statements of one block of this function that compute ``roots`` from ``operands``
    (values of inlined helpers count at their call; values made by the view at their inputs'),
    with the statements in between that compute none of it hoisted before the guard."""
    nodes = []
    for root in roots:
        for value in [root, *interior(root, operands)]:
            node = home_node(view, value, parents)
            if node is not None:
                nodes.append(node)
    if not nodes:
        return unplaced("the router is not written in this function")
    chains = [_blocks(node, parents) for node in nodes]
    common = None
    for block, _ in chains[0]:
        if all(any(b is block for b, _ in chain) for chain in chains[1:]):
            common = block
            break
    if common is None:
        return unplaced("the router spans more than one block")
    indices = {next(i for b, i in chain if b is common) for chain in chains}
    start, end = min(indices), max(indices) + 1
    return Slice(view, common, start, end, tuple(i for i in range(start, end) if i not in indices))


def env_after(piece: Slice) -> Optional[Dict[str, object]]:
    body = piece.block.body
    if piece.end < len(body):
        return piece.view.env_before.get(id(body[piece.end]))
    return piece.view.env if piece.block is piece.view.func.body else None


def bound(piece: Slice, env, value) -> Optional[str]:
    """The name that holds ``value`` after the region."""
    if env is not None:
        names = sorted(name for name, bound in env.items() if bound is value)
        return names[0] if names else None
    for stmt in reversed(piece.block.body[piece.start:piece.end]):  # the region ends its block
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
            target = stmt.body[0].targets[0].target
            assigned = piece.view.values.get(id(stmt.body[0].value))
            if isinstance(target, cst.Name) and assigned is value:
                return target.value
            if isinstance(target, cst.Tuple) and value.op == Op.ITEM and assigned is value.input \
                    and value.number < len(target.elements) and isinstance(target.elements[int(value.number)].value, cst.Name):
                return target.elements[int(value.number)].value.value
    return None


def tail_of(piece: Slice, value, temp: str) -> list:
    """``name = f(<weights>)`` as the region's last statement: that statement with the kernel's
    weights (``temp``) in place of their expression, every other expression in it a hole (so edits
    inside them apply); [] when the weights are not part of such a statement."""
    stmt = piece.block.body[piece.end - 1]
    node = value.node if piece.view.home(value) else None
    small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
    assigned = isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)
    if node is None or not (assigned or isinstance(small, cst.Return) and small.value is not None):
        return []
    rhs, parents = small.value, piece.view.parents
    path, current = set(), node
    while current is not None and current is not stmt:
        path.add(id(current))
        current = parents.get(id(current))
    if id(rhs) not in path or rhs is node:
        return []
    holes: Dict[str, cst.CSTNode] = {}

    class _Cut(cst.CSTTransformer):
        def on_visit(self, original) -> bool:
            return id(original) in path

        def on_leave(self, original, updated):
            if original is node:
                return cst.Name(temp)
            if id(original) in path or not isinstance(original, cst.BaseExpression) or isinstance(original, cst.Name):
                return updated
            name = f"tail{len(holes)}"
            holes[name] = original
            return cst.Name(f"__npu_{name}__")

    text = code(rhs.visit(_Cut()))
    for name in holes:
        text = text.replace(f"__npu_{name}__", "{" + name + "}")
    head = f"{small.targets[0].target.value} = " if assigned else "return "
    return [template(f"{head}{text}\n", **holes)]
