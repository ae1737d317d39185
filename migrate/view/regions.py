"""From a match in the dataflow view back to source: which statements a fused rewrite replaces,
and source text for its operands that is valid where the fused code runs.

A match is a root value (what the fused kernel computes) and its operands (what the kernel reads).
The statements of the root's block that compute any value between the operands and the root form
the region (``slice_of``); statements in that range that compute none of them are hoisted before
the guard (``migrate.guarded.region`` checks that they may move). An operand is written as source
(``operand_code``) only where it denotes the same value at the guard as in the original: a name
bound to it there, an attribute chain of such names, or a cheap view of them (``q.transpose(1, 2)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from ..parens import atom
from ..refusal import Refusal, unplaced
from .syntax import code
from . import Value, View
from ..tree import children as children_nodes
from .ops import Op

#: methods cheap enough to evaluate twice (guard and kernel call): views, no copies
VIEW_METHODS = {"transpose", "permute", "view", "unsqueeze", "squeeze", "expand", "expand_as", "unflatten"}


def children_of(value: Value) -> Iterable[Value]:
    yield from value.kw.values()
    yield from value.items
    if value.via is not None:
        yield value.via


def interior(root: Value, operands: Sequence[Value]) -> List[Value]:
    """The values from ``root`` down to (not including) the operands."""
    stop = {id(v) for v in operands}
    seen: Set[int] = set()
    found: List[Value] = []
    stack = [root]
    while stack:
        value = stack.pop()
        if id(value) in seen or id(value) in stop:
            continue
        seen.add(id(value))
        found.append(value)
        stack.extend(children_of(value))
    return found


def _statement_index(block: cst.CSTNode, node: cst.CSTNode, parents: Dict[int, cst.CSTNode]) -> Optional[int]:
    """The index of the statement of ``block`` that contains ``node``."""
    child = node
    parent = parents.get(id(child))
    while parent is not None and parent is not block:
        child, parent = parent, parents.get(id(parent))
    if parent is None:
        return None
    return list(block.body).index(child)


def enclosing_block(node: cst.CSTNode, parents: Dict[int, cst.CSTNode]) -> Tuple[Optional[cst.CSTNode], int]:
    """The innermost indented block (or module) holding the statement that contains ``node``."""
    child, parent = node, parents.get(id(node))
    while parent is not None and not isinstance(parent, (cst.IndentedBlock, cst.Module)):
        child, parent = parent, parents.get(id(parent))
    if parent is None:
        return None, -1
    return parent, list(parent.body).index(child)


def statement_of(node: cst.CSTNode, parents: Dict[int, cst.CSTNode]) -> cst.CSTNode:
    """The statement of a block that contains ``node`` (where a finding about it points)."""
    block, index = enclosing_block(node, parents)
    return block.body[index] if block is not None else node


@dataclass
class Slice:
    view: View
    block: cst.CSTNode
    start: int
    end: int  # exclusive
    hoisted: Tuple[int, ...]

    def guard_env(self) -> Dict[str, Value]:
        """The bindings where the guard runs: those at the region's start, plus what the hoisted
        statements bind (they run before it)."""
        body = self.block.body
        env = dict(self.view.env_before.get(id(body[self.start]), {}))
        for index in self.hoisted:
            after = self.view.env_before.get(id(body[index + 1])) if index + 1 < len(body) else None
            before = self.view.env_before.get(id(body[index]), {})
            if after is not None:
                env.update({k: v for k, v in after.items() if before.get(k) is not v})
        return env


def slice_of(view: View, root: Value, operands: Sequence[Value], parents) -> Union[Slice, Refusal]:
    if not view.home(root):
        return unplaced("the computation is not written in this function")
    block, root_index = enclosing_block(root.node, parents)
    if block is None:
        return unplaced("the computation is not inside a block of statements")
    indices = {root_index}
    for value in interior(root, operands):
        if view.home(value):
            index = _statement_index(block, value.node, parents)
            if index is None:
                return unplaced("the computation spans more than one block (part of it is inside or outside an "
                                "if/loop)")
            indices.add(index)
    start = min(indices)
    hoisted = tuple(i for i in range(start, root_index + 1) if i not in indices)
    return Slice(view, block, start, root_index + 1, hoisted)


def operand_code(piece: Slice, value: Value, env: Optional[Dict[str, Value]] = None) -> Optional[str]:
    """Source for ``value`` that denotes it where the guard runs, as an atom (``migrate.parens``:
    parenthesised unless a primary, so that it may be pasted anywhere), or None."""
    text = _source(piece, value, piece.guard_env() if env is None else env)
    return None if text is None else atom(text)


def _source(piece: Slice, value: Value, env: Dict[str, Value]) -> Optional[str]:
    named = [name for name, bound in env.items() if bound is value]
    if named:
        preferred = code(value.node) if isinstance(value.node, cst.Name) else None
        return preferred if preferred in named else sorted(named)[0]
    if value.op in (Op.NAME, Op.FREE) and value.name and value.name.split(".")[0] not in env:
        return code(value.node) if value.node is not None else value.name
    if value.op == Op.ATTR and value.input is not None and not piece.view.home(value):
        inner = operand_code(piece, value.input, env)
        return f"{inner}.{value.name}" if inner is not None else None
    if value.op == Op.GETITEM and value.node is None and value["index0"] is not None \
            and value["index0"].number is not None:  # a member of an nn.Sequential (view.build)
        inner = operand_code(piece, value.input, env)
        return f"{inner}[{int(value['index0'].number)}]" if inner is not None else None
    if piece.view.home(value) and _pure(value.node, piece.view.scope.qualify):
        return _stable_text(piece, value.node, env)
    return None


def _pure(node: cst.CSTNode, qualify) -> bool:
    """An expression cheap to evaluate again and without effects: names, numbers, attributes,
    subscripts, arithmetic, ``math.*`` calls, sizes and views."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call):
            func = current.func
            if isinstance(func, cst.Attribute) and func.attr.value in (*VIEW_METHODS, "size", "dim"):
                pass
            elif not (qualify(func) or "").startswith("math."):
                return False
        elif isinstance(current, (cst.Lambda, cst.Await, cst.Yield, cst.NamedExpr, cst.ListComp, cst.GeneratorExp,
                                  cst.DictComp, cst.SetComp)):
            return False
        stack.extend(children_nodes(current))
    return True


def _stable_text(piece: Slice, node: cst.CSTNode, env: Dict[str, Value]) -> Optional[str]:
    """``node``'s source, when every name it reads is bound where the guard runs as it is where
    ``node`` is (so the text denotes the same value there)."""
    view = piece.view
    statement = _statement_of(piece, node)
    if statement is None:
        return None
    here = view.env_before.get(id(statement), {})
    for name in _names(node):
        if here.get(name) is not env.get(name):
            return None
    return code(node.with_changes(lpar=[], rpar=[]) if getattr(node, "lpar", None) else node)


def _statement_of(piece: Slice, node: cst.CSTNode):
    """The innermost statement around ``node`` that the view recorded bindings for."""
    parents = piece.view.parents
    current = node
    while current is not None:
        if id(current) in piece.view.env_before:
            return current
        current = parents.get(id(current))
    return None


def _names(node: cst.CSTNode) -> Set[str]:
    found: Set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            found.add(current.value)
        elif isinstance(current, cst.Attribute):
            stack.append(current.value)
            continue
        elif isinstance(current, cst.Arg):
            stack.append(current.value)
            continue
        stack.extend(children_nodes(current))
    return found
