"""Small readers of the pieces of an attention computation in the dataflow view: a very negative
fill, an ``X is not None`` test, a soft-cap, a head mask under a condition, a mask buffer built from
minus infinity, the softmax below a value, how the code names a value (``label_of``)."""

from __future__ import annotations

from typing import Optional

from ._definitions import is_minus_inf_mask
from ...view import Value
from ...view.ops import Op
from ...view.syntax import code

NEGATIVE_INFINITY = ("math.inf", "torch.inf", "numpy.inf", "float.inf")


def very_negative(value: Value) -> Optional[bool]:
    """True for minus infinity or the dtype minimum, False for another large negative number
    (≤ -1e4: a finite fill), None for anything else."""
    if value is None:
        return None
    if value.op == Op.NEG and value.input is not None and value.input.op == Op.NAME:
        return True if value.input.name in NEGATIVE_INFINITY else None
    if value.op == Op.NEG and value.input is not None and value.input.op == Op.CALL and value.input.node is not None:
        text = code(value.input.node).replace(" ", "").lower()
        return True if text in ('float("inf")', "float('inf')", 'float("infinity")', "float('infinity')") else None
    if value.op == Op.CONST and value.number is not None:
        return False if value.number <= -1e4 else None
    if value.op == Op.CALL and value.name is None and value.node is not None:
        text = code(value.node).replace(" ", "").lower()
        if text in ('float("-inf")', "float('-inf')", 'float("-infinity")', "float('-infinity')"):
            return True
    if value.op == Op.ATTR and value.name == "min" and value.input is not None and value.input.op == Op.CALL \
            and value.input.name == "torch.finfo":
        return True
    if value.op == Op.NEG and value.input is not None and value.input.op == Op.ATTR and value.input.name == "max":
        return True if value.input.input is not None and value.input.input.name == "torch.finfo" else None
    if value.op in (Op.TENSOR, Op.FULL) and (value["data"] or value["fill_value"]) is not None:
        return very_negative(value["data"] or value["fill_value"])
    if value.op == Op.CAST:
        return very_negative(value.input)
    return None


def is_none_test(test: Optional[Value]) -> bool:
    """``X is not None``."""
    return (test is not None and test.op == Op.COMPARE and test.name == "IsNot" and test["other0"] is not None
            and test["other0"].name == "None")


def soft_caps(capped: Value, scores: Value) -> bool:
    """``capped`` is ``tanh(scores / cap) * cap`` (in any order of the product)."""
    for _ in range(4):
        if capped is None:
            return False
        if capped.op == Op.TANH:
            inner = capped.input
            return inner is not None and inner.op in (Op.DIV, Op.MUL) and inner.input is scores
        capped = capped.input if capped.op in (Op.MUL, Op.CAST) else None
    return False


def built_as_mask(term: Value) -> bool:
    """``self.<attr>`` (or a slice of it) whose class builds it as a 0 / minus-infinity mask."""
    while term is not None and term.op in (Op.GETITEM, Op.CAST, Op.SAME):
        term = term.input
    if term is None or term.op != Op.ATTR or term.input is None or term.input.op != Op.PARAM \
            or term.input.name != "self" or term.view is None:
        return False
    return is_minus_inf_mask(term.view.scope.cls, term.name, term.view.scope.qualify)


def label_of(value: Value) -> Optional[str]:
    """How the code names a value: its source, or the parameter's name."""
    if value.node is not None:
        return code(value.node)
    return value.name


def optional_head_mask(phi: Value) -> Optional[Value]:
    """``phi(X is not None, P * X, P)``: P, else None."""
    test, then, other = phi["test"], phi["then"], phi["else"]
    if not is_none_test(test) or then is None or then.op != Op.MUL:
        return None
    if then.input is other and then["other"] is test.input or then["other"] is other and then.input is test.input:
        return other
    return None


def softmax_below(value: Value) -> Optional[Value]:
    while value is not None and value.op in (Op.CAST, Op.SAME, Op.DROPOUT):
        value = value.input
    return value if value is not None and value.op == Op.SOFTMAX else None


def leads_to_softmax(value: Value) -> bool:
    return softmax_below(value) is not None


def mentions(value: Optional[Value], target: Value) -> bool:
    """``p.to(v.dtype)`` / ``p.type_as(v)``: the cast reads ``target``."""
    while value is not None:
        if value is target:
            return True
        value = value.input if value.op in (Op.ATTR, Op.CAST, Op.SAME) else None
    return False
