"""Pass criteria per dtype (data in ``criteria.yaml``) and the verdict for one tensor's metrics."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Dict, Optional

import yaml

from .metrics import Metrics

KEYS = ("cosine", "max_abs_err", "rel_err", "rel_err_share", "small_value")


@dataclass(frozen=True)
class Criteria:
    cosine: float
    max_abs_err: float
    rel_err: float
    rel_err_share: float
    small_value: float  # tensors whose values all lie below this are rounding noise: no cosine

    def with_overrides(self, overrides: Dict[str, float]) -> "Criteria":
        return replace(self, **{k: float(v) for k, v in overrides.items() if k in KEYS})

    def to_json(self) -> dict:
        return asdict(self)

    def judge(self, m: Metrics) -> Optional[str]:
        """None when ``m`` passes, else the first reason it does not."""
        if m.problem:
            return m.problem
        if m.nan_inf_mismatch:
            return f"{m.nan_inf_mismatch} NaN/Inf mismatches"
        if m.max_abs_value <= self.small_value:
            if m.max_abs_err > self.small_value:
                return f"max abs err {m.max_abs_err:.3g} > {self.small_value:g} on values below {self.small_value:g}"
            return None
        if m.cosine is not None and m.cosine < self.cosine:
            return f"cosine {m.cosine:.6f} < {self.cosine}"
        if m.max_abs_err > self.max_abs_err and m.rel_err_ratio < self.rel_err_share:
            return (
                f"max abs err {m.max_abs_err:.3g} > {self.max_abs_err:g} and only "
                f"{m.rel_err_ratio:.2%} of elements within rel err {self.rel_err:g}"
            )
        return None


@lru_cache(maxsize=None)
def default_criteria() -> Dict[str, Criteria]:
    data = yaml.safe_load((Path(__file__).with_name("criteria.yaml")).read_text())
    return {dtype: Criteria(**{k: float(v) for k, v in values.items()}) for dtype, values in data.items()}


def supported_dtypes() -> tuple:
    return tuple(default_criteria())
