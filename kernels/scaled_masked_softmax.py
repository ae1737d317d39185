"""``npu_scaled_masked_softmax``: ``softmax(x * scale)`` over the last dim with a bool mask.

``mask`` True = masked out (the Megatron convention, the opposite of an SDPA bool mask).
Masked logits are set to -10000 like the Megatron fused kernel this op replaces, so a fully
masked row comes out uniform rather than NaN. Differentiable.
"""

from __future__ import annotations

import torch

from ._checks import check_dtypes, dtype_name, require
from ._common import FLOATS
from .registry import Derivative, npu_op

_MASKED_LOGIT = -10000.0


def _save(ctx, args, y):
    ctx.save_for_backward(y, args["mask"])
    ctx.args = (args["scale"], args["fixed_triu_mask"])


def _grads(ctx, y_grad):
    y, mask = ctx.saved_tensors
    return {"x": torch.ops.npu.npu_scaled_masked_softmax_backward(y_grad, y, mask, *ctx.args)}


@npu_op(derivative=Derivative(_save, _grads))
def npu_scaled_masked_softmax(x, mask, scale=1, fixed_triu_mask=False):
    op = "npu_scaled_masked_softmax"
    check_dtypes(op, FLOATS, x=x)
    require(mask.dtype == torch.bool, op,
            f"mask must be bool (True = masked), got {dtype_name(mask.dtype)}")
    require(fixed_triu_mask is False, op, "fixed_triu_mask is a reserved parameter; only False is supported")
    require(x.dim() == 4, op, f"x must be 4-D (viewed as NCHW), got {x.dim()}-D")
    for name, size in (("H", x.shape[-2]), ("W", x.shape[-1])):
        require(
            32 <= size <= 4096 and size % 32 == 0, op,
            f"x's last two dims must be in [32, 4096] and multiples of 32; {name} = {size}",
        )
    try:
        broadcasts = torch.broadcast_shapes(mask.shape, x.shape) == x.shape
    except RuntimeError:
        broadcasts = False
    require(broadcasts, op, f"mask shape {tuple(mask.shape)} must broadcast to x shape {tuple(x.shape)}")
    logits = (x.float() * float(scale)).masked_fill(mask, _MASKED_LOGIT)
    return torch.softmax(logits, dim=-1).to(x.dtype)


@npu_op
def npu_scaled_masked_softmax_backward(y_grad, y, mask, scale, fixed_triu_mask):
    """``dx = scale * y * (dy - sum(dy * y))`` over the last dim, 0 where the mask replaced the logit."""
    op = "npu_scaled_masked_softmax_backward"
    require(fixed_triu_mask is False, op, "fixed_triu_mask is a reserved parameter; only False is supported")
    yf, g = y.float(), y_grad.float()
    dx = float(scale) * yf * (g - (g * yf).sum(-1, keepdim=True))
    return dx.masked_fill(mask, 0.0).to(y.dtype)
