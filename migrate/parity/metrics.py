"""msprobe's comparison metrics for one pair of tensors (facts §0(iv) and §7).

The migrated tensor is msprobe's "NPU" side (N), the original is the bench (B). Everything is
computed in float64 on the CPU. Relative error is ``|N - B| / (|B| + eps)`` as in msprobe, so an
element that is 0 on both sides has relative error 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

import torch

_EPS = torch.finfo(torch.float64).eps


@dataclass
class Metrics:
    """Metrics of one tensor pair; ``problem`` is set when the pair cannot be compared at all."""

    cosine: Optional[float] = None  # None for scalars and one-element tensors (msprobe skips them)
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    one_thousandth_ratio: float = 1.0  # share of elements with relative error < 0.001
    five_thousandths_ratio: float = 1.0  # share of elements with relative error < 0.005
    rel_err_ratio: float = 1.0  # share with relative error < the criterion's threshold
    nan_inf_mismatch: int = 0  # positions where NaN/+Inf/-Inf differ between the sides
    max_abs_value: float = 0.0  # largest finite |value| on either side (tells rounding noise apart)
    problem: Optional[str] = None  # shape mismatch and the like

    def to_json(self) -> dict:
        return asdict(self)


def cosine_similarity(n: torch.Tensor, b: torch.Tensor) -> Optional[float]:
    """msprobe's cosine: each side normalised by its max |value| first, result clipped to [-1, 1]."""
    if n.numel() <= 1:
        return None
    n_scale, b_scale = n.abs().max(), b.abs().max()
    if n_scale == 0 and b_scale == 0:
        return 1.0
    if n_scale == 0 or b_scale == 0:
        return 0.0
    n, b = n / n_scale, b / b_scale
    cos = torch.dot(n, b) / (n.norm() * b.norm())
    return float(cos.clamp(-1.0, 1.0))


def _special_mismatch(n: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-element: True where the NaN / +Inf / -Inf pattern differs."""
    return (
        (n.isnan() != b.isnan())
        | (n.isposinf() != b.isposinf())
        | (n.isneginf() != b.isneginf())
    )


def compare(original: torch.Tensor, migrated: torch.Tensor, rel_err: float = 0.001) -> Metrics:
    """Metrics of ``migrated`` against ``original``; ``rel_err`` sets ``rel_err_ratio``'s threshold."""
    if original.shape != migrated.shape:
        return Metrics(problem=f"shape {tuple(migrated.shape)} != original {tuple(original.shape)}")
    b = original.detach().to("cpu", torch.float64).flatten()
    n = migrated.detach().to("cpu", torch.float64).flatten()
    if b.numel() == 0:
        return Metrics()

    mismatch = _special_mismatch(n, b)
    finite = n.isfinite() & b.isfinite()
    n_f, b_f = n[finite], b[finite]
    abs_err = (n_f - b_f).abs()
    rel = abs_err / (b_f.abs() + _EPS)

    def share(threshold: float) -> float:
        # non-finite elements count as within tolerance only when both sides agree on them
        agreeing_special = (~finite & ~mismatch).sum()
        return int((rel < threshold).sum() + agreeing_special) / b.numel()

    return Metrics(
        cosine=cosine_similarity(n_f, b_f) if n.numel() > 1 else None,
        max_abs_err=float(abs_err.max()) if abs_err.numel() else 0.0,
        max_rel_err=float(rel.max()) if rel.numel() else 0.0,
        one_thousandth_ratio=share(0.001),
        five_thousandths_ratio=share(0.005),
        rel_err_ratio=share(rel_err),
        nan_inf_mismatch=int(mismatch.sum()),
        max_abs_value=float(torch.maximum(n_f.abs().max(), b_f.abs().max())) if n_f.numel() else 0.0,
    )
