"""Small readers of libcst statements and expressions, shared by the pattern rules."""

from __future__ import annotations

from typing import Callable, Optional, Set

import libcst as cst

from ..tree import walk

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
