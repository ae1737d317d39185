"""The RMSNorm family's residual detector: ``x · rsqrt(mean(x²) + eps)`` in any form, and RMSNorm
functions and modules."""

from __future__ import annotations

from typing import List, Optional

from .._residual import Family, peel, values
from ...triage import computes
from ...view import Value, View
from ...view.ops import Op


def _mean_of_square(value: Optional[Value]) -> bool:
    value = peel(value)
    if value is None or value.op != Op.ADD:
        return False
    for side in (value.input, value["other"]):
        mean = peel(side)
        if mean is not None and mean.op == Op.MEAN and peel(mean.input) is not None and peel(mean.input).op == Op.SQUARE:
            return True
    return False


def _rms_norm(view: View) -> List[Value]:
    found = [v for v in values(view, Op.RSQRT) if _mean_of_square(v.input)]
    found += [v for v in values(view, Op.DIV) if v["other"] is not None and peel(v["other"]).op == Op.SQRT
              and _mean_of_square(peel(v["other"]).input)]
    found += values(view, Op.RMS_NORM, Op.RMS_NORM_MODULE)
    return found


FAMILY = Family(
    "rms_norm", __package__, "pattern.rms_norm.unrecognised",
    frozenset({"rsqrt", "sqrt", "rms_norm", "RMSNorm"}), _rms_norm,
    lambda v: "nn.RMSNorm module" if v.op == Op.RMS_NORM_MODULE else "x · rsqrt(mean(x²) + eps)",
    computes=lambda words, function: any(computes(words, function, op)
                                         for op in (Op.MEAN, Op.RMS_NORM, Op.RMS_NORM_MODULE)),
)
