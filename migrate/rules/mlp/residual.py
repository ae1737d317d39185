"""The gated-MLP family's residual detector: ``act(projection) · projection``."""

from __future__ import annotations

from typing import List, Optional

from .._residual import Family, peel, values
from ...triage import computes
from ...view import Value, View
from ...view.ops import Op

PROJECTIONS = (Op.LINEAR, Op.MATMUL, Op.CALL, Op.ITEM, Op.GETITEM)
ACTIVATIONS = (Op.SILU, Op.GELU, Op.ACT)


def _is_projection(value: Optional[Value]) -> bool:
    value = peel(value, (Op.CAST, Op.SAME, Op.CHANNELS))  # a half or the even channels of a projection too
    return value is not None and value.op in PROJECTIONS


def _gated_mlp(view: View) -> List[Value]:
    found = []
    for value in values(view, Op.MUL):
        for act, other in ((value.input, value["other"]), (value["other"], value.input)):
            act = peel(act)
            if act is not None and act.op in ACTIVATIONS and _is_projection(act.input) and _is_projection(other):
                found.append(value)
                break
    return found


FAMILY = Family(
    "gated_mlp", __package__, "pattern.gated_mlp.unrecognised",
    frozenset({"silu", "SiLU", "gelu", "GELU", "act", "act_fn", "activation", "sigmoid"}), _gated_mlp,
    lambda v: "act(projection) · projection",
    computes=lambda words, function: computes(words, function, Op.MUL),
)
