"""Small helpers shared by the emulated kernels."""

from __future__ import annotations

import torch

from ._checks import dtype_name, require

#: The floating dtypes the NPU vector units compute in (no float64 on an NPU).
FLOATS = (torch.float16, torch.bfloat16, torch.float32)


def norm_dims(op: str, x: torch.Tensor, gamma: torch.Tensor, min_dim: int = 1) -> tuple:
    """The trailing dims of ``x`` that ``gamma`` normalises; ``gamma.shape`` must equal them."""
    require(min_dim <= x.dim() <= 8, op, f"x must have {min_dim} to 8 dims, got {x.dim()}")
    require(1 <= gamma.dim() <= x.dim(), op, f"gamma must have 1 to x.dim()={x.dim()} dims, got {gamma.dim()}")
    tail = tuple(x.shape[x.dim() - gamma.dim():])
    require(
        tuple(gamma.shape) == tail, op,
        f"gamma shape {tuple(gamma.shape)} must equal the trailing dims of x {tail}",
    )
    return tuple(range(x.dim() - gamma.dim(), x.dim()))


def require_gamma_dtype(op: str, x: torch.Tensor, gamma: torch.Tensor, float32_gamma: bool = False) -> None:
    """The fused norms take gamma in x's dtype; with ``float32_gamma`` (``npu_rms_norm``) also a
    float32 gamma with float16/bfloat16 x, the mixed precision that AMP training produces."""
    mixed = float32_gamma and gamma.dtype == torch.float32 and x.dtype in (torch.float16, torch.bfloat16)
    allowed = f"x dtype {dtype_name(x.dtype)}" + (" (or float32 with float16/bfloat16 x)" if float32_gamma else "")
    require(
        gamma.dtype == x.dtype or mixed, op,
        f"gamma dtype {dtype_name(gamma.dtype)} must equal {allowed} (cast the weight, or x, first)",
    )
