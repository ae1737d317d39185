"""The statements around a gated MLP that its rewrite reads or removes: the feeders of the product
(statements that only compute its operands), whether a name they bind is read elsewhere, the
statements of a function and the loops they sit in, and the operand text written in their place."""

from __future__ import annotations

from typing import List, Optional, Set, Tuple

import libcst as cst

from ...defuse import read
from ...parens import atom
from ...refusal import Refusal, unbound, unplaced
from ...view.syntax import code
from ...view.ops import Op

Hole = Tuple[str, Optional[cst.CSTNode]]  # (text or "{name}" placeholder, node for the placeholder)


class Node:
    """A source node standing for a callable (``F.silu`` of ``F.silu(x)``)."""

    def __init__(self, node: cst.CSTNode) -> None:
        self.node = node
        self.op, self.kw = "node", {}


def assigned(stmt: cst.CSTNode) -> Optional[str]:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
        targets = stmt.body[0].targets
        if len(targets) == 1 and isinstance(targets[0].target, cst.Name):
            return targets[0].target.value
    return None


def inside(node: cst.CSTNode, container: cst.CSTNode, parents) -> bool:
    while node is not None:
        if node is container:
            return True
        node = parents.get(id(node))
    return False


def removable(view, block, feeders: List[int], index: int, product: cst.CSTNode) -> Optional[Refusal]:
    """Why the statements ``feeders`` (before the product's statement ``index``) cannot be folded into
    the product, or None."""
    if not feeders:
        return None
    if feeders != list(range(feeders[0], index)):
        return unplaced("other statements run between the projections and the product")
    defined: Set[str] = set()
    for i in feeders:
        stmt = block.body[i]
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
            return unplaced("an intermediate statement is not a plain assignment")
        for target in stmt.body[0].targets:
            names = _target_names(target.target)
            if names is None:
                return unplaced("an intermediate statement assigns to something other than names")
            defined |= set(names)
    reused = sorted(name for name in defined if _read_elsewhere(view, block, feeders, index, product, name))
    if reused:
        return unbound(" and ".join(f"`{n}`" for n in reused) + " is read elsewhere in the function")
    return None


def _read_elsewhere(view, block, feeders: List[int], index: int, product, name: str) -> bool:
    """Whether code other than the product reads the value the folded statements leave in ``name``:
    later statements that still see that binding (``gate, up_states = up_states.chunk(2)`` then
    ``up_states = up_states * act(gate)`` rebinds it, so reads after that do not count), the product's
    own statement outside the product, and, inside a loop, any read of the name in the loop."""
    stmt = block.body[index]
    value = view.env_before.get(id(stmt), {}).get(name)
    if name in _reads_except(stmt, {id(product)}):
        return True
    folded = {id(block.body[i]) for i in feeders} | {id(stmt)}
    for other, env in _statements(view):
        if id(other) not in folded and env.get(name) is value and name in read(_header(other)):
            return True
    loop = _enclosing_loop(block, view)
    return loop is not None and name in _reads_except(loop, folded | {id(product)})


def _statements(view):
    """(statement, the bindings where it starts) for every statement the view read."""
    for node in view.func.body.body if isinstance(view.func.body, cst.IndentedBlock) else ():
        for found in _walk_statements(node):
            yield found, view.env_before.get(id(found), {})


def _walk_statements(stmt):
    yield stmt
    for name in ("body", "orelse", "finalbody", "handlers"):
        part = getattr(stmt, name, None)
        parts = part if isinstance(part, (tuple, list)) else [part]
        for piece in parts:
            inner = getattr(piece, "body", None)
            if isinstance(piece, (cst.If, cst.Else, cst.Finally, cst.ExceptHandler, cst.IndentedBlock)) or inner is not None:
                if isinstance(piece, cst.If):
                    yield from _walk_statements(piece)
                    continue
                block = piece if isinstance(piece, cst.IndentedBlock) else inner
                for child in getattr(block, "body", ()) if not isinstance(block, (tuple, list)) else block:
                    if isinstance(child, cst.BaseStatement):
                        yield from _walk_statements(child)


def _header(stmt) -> List[cst.CSTNode]:
    """What a statement reads itself (a compound statement's test or iterable, not its body)."""
    if isinstance(stmt, cst.SimpleStatementLine) or isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return [stmt]
    return [n for n in (getattr(stmt, "test", None), getattr(stmt, "iter", None)) if n is not None] + \
        [item for item in getattr(stmt, "items", ())]


def _enclosing_loop(block, view):
    node = view.parents.get(id(block))
    while node is not None and node is not view.func:
        if isinstance(node, (cst.For, cst.While)):
            return node
        node = view.parents.get(id(node))
    return None


def _target_names(node: cst.CSTNode) -> Optional[List[str]]:
    if isinstance(node, cst.Name):
        return [node.value]
    if isinstance(node, (cst.Tuple, cst.List)):
        names = [e.value.value for e in node.elements if isinstance(e.value, cst.Name) and not isinstance(e, cst.StarredElement)]
        return names if len(names) == len(node.elements) else None
    return None


def _reads_except(root: cst.CSTNode, skip: Set[int]) -> Set[str]:
    """Names read in ``root`` outside the subtrees whose ids are in ``skip`` (statements or expressions)."""

    class _Cut(cst.CSTTransformer):
        def on_leave(self, original, updated):
            if id(original) not in skip:
                return updated
            return cst.Name("__npu_cut__") if isinstance(original, cst.BaseExpression) else cst.RemoveFromParent()

    return read([root.visit(_Cut())]) - {"__npu_cut__"}


def operand(view, value, block, feeders, here, product, parents, moved=()) -> Optional[Hole]:
    """The source of ``value`` where the fused call runs: a hole for its own node when that node is in
    the product or in a statement folded into it (the names it reads then must be bound there as
    where it was written), else a name bound to it there, else an attribute chain; None otherwise."""
    node = value.node
    holders = [block.body[i] for i in feeders] + list(moved)
    if node is not None and product is not None and inside(node, product, parents):
        return "", node
    for stmt in holders if node is not None else ():
        if inside(node, stmt, parents):
            own = view.env_before.get(id(stmt), {})
            if all(own.get(n) is here.get(n) for n in read([node])):
                return "", node
            return None
    named = sorted(n for n, bound in here.items() if bound is value)
    if named:
        return named[0], None
    if value.op == Op.ATTR and value.input is not None and value.input.op == Op.PARAM and node is not None:
        return atom(code(node)), None
    return None

