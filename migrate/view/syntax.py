"""Small readers of libcst statements and expressions, shared by the view's builder and the rules."""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Set

import libcst as cst

from ..defuse import defined
from ..tree import children, walk

Qualify = Callable[[cst.CSTNode], Optional[str]]  # a node -> its qualified name, when it names an import

_CODE = cst.Module(body=[])


def code(node: cst.CSTNode) -> str:
    return _CODE.code_for_node(node)


def names_in(node: cst.CSTNode) -> Set[str]:
    return {n.value for n in walk(node) if isinstance(n, cst.Name)}


def is_name(node: cst.CSTNode, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def int_value(node: cst.CSTNode) -> Optional[int]:
    if isinstance(node, cst.Integer):
        return int(node.value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and isinstance(node.expression, cst.Integer):
        return -int(node.expression.value)
    return None


def keyword_value(call: cst.Call, keyword: str) -> Optional[cst.BaseExpression]:
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value == keyword), None)


def arg(call: cst.Call, index: int, keyword: str) -> Optional[cst.BaseExpression]:
    """The argument passed as ``keyword=`` or at positional ``index``."""
    found = keyword_value(call, keyword)
    if found is not None:
        return found
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return positional[index].value if index < len(positional) else None


def method(node: cst.CSTNode, names) -> Optional[cst.Call]:
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in names:
        return node
    return None


# -- readers the view's builder uses ---------------------------------------------------------------
def literal(node: cst.CSTNode) -> Optional[float]:
    """The value of an int/float literal, possibly negated."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = literal(node.expression)
        return None if inner is None else -inner
    if isinstance(node, (cst.Integer, cst.Float)):
        return float(node.evaluated_value)
    return None


def ends_in_return(suite) -> bool:
    """The block's last statement is a plain ``return`` and it has no other return."""
    body = body_of(suite)
    if not body or not isinstance(body[-1], cst.SimpleStatementLine) or len(body[-1].body) != 1 \
            or not isinstance(body[-1].body[0], cst.Return):
        return False
    return sum(isinstance(n, cst.Return) for s in body for n in walk(s)) == 1


def decorated(func: cst.FunctionDef, name: str) -> bool:
    return any(isinstance(d.decorator, cst.Name) and d.decorator.value == name for d in func.decorators)
def in_place(method: str) -> bool:
    """``scatter_``, ``masked_fill_``: the in-place variant of a method (not a dunder)."""
    return method.endswith("_") and not method.endswith("__")


def in_place_receiver(node: cst.CSTNode) -> Optional[str]:
    """``x`` for a statement ``x.<method>_(...)`` that updates the local tensor ``x`` in place."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and isinstance(node.func.value, cst.Name) \
            and in_place(node.func.attr.value):
        return node.func.value.value
    return None


def dotted(node: cst.CSTNode) -> bool:
    """A pure ``a.b.c`` chain (``f().b`` is not: its name is not a qualified name)."""
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def body_of(suite) -> Sequence[cst.BaseStatement]:
    return suite.body if isinstance(suite, cst.IndentedBlock) else ()


def walk_names(node: cst.CSTNode) -> List[str]:
    found, stack = [], [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            found.append(current.value)
        stack.extend(children(current))
    return found


def assigned_names(stmt: cst.CSTNode) -> List[str]:
    """Names assigned anywhere in a compound statement (not in nested functions)."""
    return sorted(defined([stmt]))
