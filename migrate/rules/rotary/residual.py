"""The rotary family's residual detector: ``x·cos ± rotate(x)·sin``, complex rotations, pairs rotated
by hand and 2x2 tables applied to channel pairs."""

from __future__ import annotations

from typing import List, Optional

from .._residual import Family, peel, values
from ._match import may_rotate
from ._matrix import applied
from ...view import Value, View
from ...view.ops import Op


def _is_rotation(value: Optional[Value], depth: int = 0) -> bool:
    """``cat((-x2, x1))``, ``stack((-x_odd, x_even))``, a call of a rotate helper that was not inlined, a
    branch (``phi``) choosing one."""
    value = peel(value, (Op.CAST, Op.SAME, Op.RESHAPE, Op.FLATTEN))
    if value is None:
        return False
    if value.op == Op.PHI and depth < 4:
        return any(_is_rotation(value[k], depth + 1) for k in ("then", "else"))
    if value.op in (Op.CAT, Op.STACK):
        items = value["tensors"].items if value["tensors"] is not None else ()
        return any(item.op == Op.NEG for item in items)
    return value.op == Op.CALL and "rot" in (_callee_name(value) or "").lower()


def _callee_name(value: Value) -> Optional[str]:
    callee = value["callee"]
    return callee.name if callee is not None else value.name


def _factors(product: Value, depth: int = 4) -> List[Value]:
    """The factors of a product of products (``x * cos * scale``)."""
    found = []
    for side in (product.input, product["other"]):
        side = peel(side)
        if side is not None and side.op == Op.MUL and depth > 0:
            found += _factors(side, depth - 1)
        elif side is not None:
            found.append(side)
    return found


def _rotary(view: View) -> List[Value]:
    found = []
    for value in values(view, Op.ADD, Op.SUB):
        products = [peel(value.input), peel(value["other"])]
        if all(p is not None and p.op == Op.MUL for p in products):
            factors = [f for p in products for f in _factors(p)]
            if any(_is_rotation(f) for f in factors):
                found.append(value)
    for value in values(view, Op.MUL):
        if any(peel(side) is not None and peel(side).op == Op.VIEW_AS_COMPLEX for side in (value.input, value["other"])):
            found.append(value)
    for value in values(view, Op.ADD, Op.SQUEEZE, Op.EINSUM):  # a 2x2 table applied to channel pairs
        if value not in found and applied(value) is not None:
            found.append(value)
    for value in values(view, Op.STACK):  # pairs rotated by hand: stack([x0*c - x1*s, x1*c + x0*s])
        items = value["tensors"].items if value["tensors"] is not None else ()
        if len(items) == 2 and {i.op for i in items} == {"add", "sub"} and all(
                peel(i.input) is not None and peel(i.input).op == Op.MUL for i in items):
            found.append(value)
    return found


FAMILY = Family(
    "rotary", __package__, "pattern.rotary.unrecognised",
    frozenset({"cat", "stack", "view_as_complex", "rotate_half", "cos", "sin"}), _rotary,
    lambda v: "complex rotation" if v.op == Op.MUL else "2x2 table applied to channel pairs" if applied(v) is not None
    else "x·cos ± rotate(x)·sin",
    computes=lambda words, function: may_rotate(words, function, function.names),  # a helper by any name
)
