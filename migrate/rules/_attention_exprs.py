"""The expressions hand-written attention is made of: ``q @ k.transpose(-2, -1)``, a scale that is
a plain number, a very negative fill value, ``softmax(s, dim=-1)`` with the casts around it."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst
import libcst.matchers as m

from npu_migrate.migrate.rules._syntax import Qualify, arg, code, int_value, is_name, method

SOFTMAX = {"torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax"}
MATMUL = {"torch.matmul"}
DROPOUT_FN = {"torch.nn.functional.dropout"}
CASTS = {"to", "type_as", "float", "half", "bfloat16", "type"}


def transposed(node: cst.CSTNode, qualify: Qualify) -> Optional[cst.BaseExpression]:
    """``k`` from ``k.transpose(-2, -1)``, ``k.transpose(2, 3)``, ``k.mT``, ``torch.transpose(k, -1, -2)``."""
    if isinstance(node, cst.Attribute) and node.attr.value == "mT":
        return node.value
    if not isinstance(node, cst.Call):
        return None
    if method(node, {"transpose"}) and len(node.args) == 2:
        base, dims = node.func.value, [int_value(a.value) for a in node.args]
    elif qualify(node.func) == "torch.transpose" and len(node.args) == 3:
        base, dims = node.args[0].value, [int_value(a.value) for a in node.args[1:]]
    else:
        return None
    return base if sorted(d for d in dims if d is not None) in ([-2, -1], [2, 3]) and None not in dims else None


def matmul(node: cst.CSTNode, qualify: Qualify) -> Optional[Tuple[cst.BaseExpression, cst.BaseExpression]]:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        return node.left, node.right
    if isinstance(node, cst.Call) and qualify(node.func) in MATMUL and len(node.args) == 2:
        return node.args[0].value, node.args[1].value
    return None


def very_negative(node: cst.CSTNode, qualify: Qualify, values: Dict[str, List[cst.BaseExpression]],
                  seen: frozenset = frozenset()) -> bool:
    """``float('-inf')``, ``-math.inf``, ``torch.finfo(t).min``, or a ``torch.tensor`` of one, or a
    name every assignment of which is one of these."""
    if isinstance(node, cst.Name) and node.value in values:
        if node.value in seen:
            return True
        return all(very_negative(v, qualify, values, seen | {node.value}) for v in values[node.value])
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = node.expression
        if qualify(inner) in ("math.inf", "torch.inf", "numpy.inf"):
            return True
        return isinstance(inner, cst.Call) and code(inner.func) == "float" and _string(inner) == "inf"
    if isinstance(node, cst.Call) and code(node.func) == "float":
        return _string(node) in ("-inf", "-infinity")
    if isinstance(node, cst.Attribute) and node.attr.value == "min" and isinstance(node.value, cst.Call):
        return qualify(node.value.func) == "torch.finfo"
    if isinstance(node, cst.Call) and qualify(node.func) in ("torch.tensor", "torch.full_like") and node.args:
        return very_negative(node.args[-1 if qualify(node.func) == "torch.full_like" else 0].value, qualify, values, seen)
    return False


def _string(call: cst.Call) -> Optional[str]:
    if len(call.args) == 1 and isinstance(call.args[0].value, cst.SimpleString):
        value = call.args[0].value.evaluated_value
        return value.lower() if isinstance(value, str) else None
    return None


def plain_number(node: cst.CSTNode, qualify: Qualify, values=None, depth: int = 0, numbers=frozenset()) -> bool:
    """An expression that is a Python number (so ``scale=`` takes it as is); a local name counts
    when its only assignment in ``values`` is one, or it is in ``numbers`` (parameters annotated
    ``float``/``int``); any other parameter may be a tensor."""
    values = values or {}
    if isinstance(node, (cst.Integer, cst.Float)):
        return True
    if isinstance(node, cst.Name):
        if node.value in numbers:
            return True
        return node.value in values and depth < 8 and plain_number(values[node.value], qualify, values, depth + 1, numbers)
    if isinstance(node, cst.UnaryOperation):
        return plain_number(node.expression, qualify, values, depth, numbers)
    if isinstance(node, cst.BinaryOperation):
        return (plain_number(node.left, qualify, values, depth, numbers)
                and plain_number(node.right, qualify, values, depth, numbers))
    if isinstance(node, cst.Call):
        name = qualify(node.func) or ""
        return name.startswith("math.") or bool(method(node, {"size"}))
    if isinstance(node, cst.Subscript):
        return isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape"
    return False


def softmax_casts(value, cur: str, qualify: Qualify) -> Optional[List[cst.BaseExpression]]:
    """The casts around ``softmax(cur, dim=-1)`` (a list, maybe empty), or None when it is not one."""
    casts = []
    while method(value, CASTS) and not _is_softmax_call(value, cur, qualify):
        casts.append(value)
        value = value.func.value
    return casts if _is_softmax_call(value, cur, qualify) else None


def is_softmax_of(value, cur, qualify) -> bool:
    return softmax_casts(value, cur, qualify) is not None


def _is_softmax_call(call, cur: str, qualify: Qualify) -> bool:
    if not isinstance(call, cst.Call):
        return False
    if qualify(call.func) in SOFTMAX:
        source, dim = arg(call, 0, "input"), arg(call, 1, "dim")
    elif method(call, {"softmax"}):
        source, dim = call.func.value, arg(call, 0, "dim")
    else:
        return False
    # the source may be cast first: softmax(scores.float(), dim=-1)
    while method(source, CASTS):
        source = source.func.value
    return is_name(source, cur) and dim is not None and int_value(dim) in (-1, 3)


def softmax_in(stmt, name: str, qualify: Qualify) -> bool:
    return any(_is_softmax_call(c, name, qualify) for c in m.findall(stmt, m.Call()))
