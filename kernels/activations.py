"""Activations: ``npu_swiglu``, ``npu_geglu``, ``npu_gelu``, ``npu_fast_gelu`` (and ``fast_gelu``).

All compute in float32 and round once to the input dtype; all are differentiable on a real NPU.
The traps they keep: ``npu_swiglu`` applies SiLU to the FIRST half (gate must come first),
``npu_geglu`` defaults to the tanh GELU, and ``npu_fast_gelu`` is ``x * sigmoid(1.702 x)``,
not GELU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from npu_migrate.kernels._checks import check_dtypes, require
from npu_migrate.kernels._common import FLOATS
from npu_migrate.kernels.registry import npu_op

#: Which half ``npu_geglu(activate_left=False)`` passes through GELU. The current CANN docs
#: (aclnnGeGluV3, CANN 8.3/8.5) say the RIGHT half: ``out = A * gelu(B)``; older docs (CANN 8.0
#: to 8.2) say the reverse. Set to ``"left"`` to emulate the older reading (``activate_left=True``
#: then flips too). Verify on hardware.
GEGLU_DEFAULT_ACTIVATED_HALF = "right"


def _halves(op: str, x: torch.Tensor, dim: int):
    check_dtypes(op, FLOATS, self=x)
    require(1 <= x.dim() <= 8, op, f"self must have 1 to 8 dims, got {x.dim()}")
    require(-x.dim() <= dim < x.dim(), op, f"dim {dim} out of range for a {x.dim()}-D input")
    require(x.shape[dim] % 2 == 0, op, f"the size of dim {dim} must be even to split in two halves, got {x.shape[dim]}")
    return x.float().chunk(2, dim=dim)


def fast_gelu_f32(x: torch.Tensor) -> torch.Tensor:
    """``x * sigmoid(1.702 x)`` (the A2/A3 formula ``x / (1 + exp(-1.702 x))``)."""
    return x * torch.sigmoid(1.702 * x)


def _fast_gelu(op: str, x: torch.Tensor) -> torch.Tensor:
    check_dtypes(op, FLOATS, self=x)
    return fast_gelu_f32(x.float()).to(x.dtype)


@npu_op
def npu_swiglu(self, dim=-1):
    """``A, B = self.chunk(2, dim)``; ``silu(A) * B`` (facts §2.5).

    Like the kernel, refuses non-contiguous and empty input: torch_npu's API page for
    ``npu_swiglu`` (Ascend Extension for PyTorch 7.2.0, "(beta)torch_npu.npu_swiglu") says of
    ``input`` "不支持非连续的Tensor，不支持空Tensor" (no non-contiguous tensor, no empty tensor).
    """
    op = "npu_swiglu"
    require(self.numel() > 0, op, f"self must not be empty, got shape {tuple(self.shape)}")
    require(self.is_contiguous(), op,
            "self must be contiguous (the kernel rejects non-contiguous input); call .contiguous() first")
    a, b = _halves(op, self, dim)
    return (F.silu(a) * b).to(self.dtype)


@npu_op
def npu_geglu(self, dim=-1, approximate=1, activate_left=False):
    """``(out, gelu_half)``; ``approximate`` 1 (default) = tanh GELU, 0 = erf GELU.

    Which half is activated follows ``GEGLU_DEFAULT_ACTIVATED_HALF`` (see above).
    """
    op = "npu_geglu"
    require(approximate in (0, 1), op, f"approximate must be 0 (none) or 1 (tanh), got {approximate!r}")
    a, b = _halves(op, self, dim)
    left = activate_left if GEGLU_DEFAULT_ACTIVATED_HALF == "right" else not activate_left
    gated, other = (a, b) if left else (b, a)
    gelu = F.gelu(gated, approximate="tanh" if approximate == 1 else "none")
    return (gelu * other).to(self.dtype), gelu.to(self.dtype)


@npu_op
def npu_gelu(self, *, approximate='none'):
    """Same as ``F.gelu`` (``approximate`` 'none' or 'tanh')."""
    op = "npu_gelu"
    check_dtypes(op, FLOATS, self=self)
    require(approximate in ("none", "tanh"), op, f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return F.gelu(self.float(), approximate=approximate).to(self.dtype)


@npu_op
def npu_fast_gelu(self):
    """``x * sigmoid(1.702 x)`` - a sigmoid approximation, NOT erf/tanh GELU."""
    return _fast_gelu("npu_fast_gelu", self)


@npu_op
def fast_gelu(self):
    """The older name of ``npu_fast_gelu`` (also exported by torch_npu)."""
    return _fast_gelu("fast_gelu", self)
