"""Small readers of libcst statements and expressions, shared by the pattern rules."""

from __future__ import annotations

from typing import Callable, Dict, Optional, Set, Tuple

import libcst as cst

from npu_migrate.migrate.tree import walk

Qualify = Callable[[cst.CSTNode], Optional[str]]  # a node -> its qualified name, when it names an import

_CODE = cst.Module(body=[])


def code(node: cst.CSTNode) -> str:
    return _CODE.code_for_node(node)


def assign(stmt: cst.CSTNode) -> Optional[Tuple[str, cst.BaseExpression, Optional[cst.BaseAugOp]]]:
    """``name = value`` or ``name op= value`` as (name, value, op), else None."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        return small.targets[0].target.value, small.value, None
    if isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
        return small.target.value, small.value, small.operator
    return None


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


def reads_only_metadata(stmt, name: str) -> bool:
    """Every use of ``name`` in ``stmt`` reads its dtype, device or shape."""
    nodes = walk(stmt)
    uses = [n for n in nodes if is_name(n, name)]
    meta = [n for n in nodes if isinstance(n, cst.Attribute) and is_name(n.value, name)
            and n.attr.value in ("dtype", "device", "shape")]
    meta_calls = [n for n in nodes if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
                  and is_name(n.func.value, name) and n.func.attr.value in ("size", "dim")]
    return bool(uses) and len(uses) == len(meta) + len(meta_calls)


def parenthesized(expr) -> str:
    text = code(expr)
    return f"({text})" if isinstance(expr, cst.BinaryOperation) and not expr.lpar else text


def substitute(expr, temps: Dict[str, cst.BaseExpression]):
    """``expr`` with each name in ``temps`` replaced by its expression."""
    if not temps:
        return expr
    return expr.visit(_Renamer(temps))


def rename(expr, mapping: Dict[str, str]):
    if not mapping:
        return expr
    return expr.visit(_Renamer({k: cst.Name(v) for k, v in mapping.items()}))


class _Renamer(cst.CSTTransformer):
    def __init__(self, mapping):
        super().__init__()
        self.mapping = mapping

    def leave_Name(self, original, updated):
        return self.mapping.get(original.value, updated)
