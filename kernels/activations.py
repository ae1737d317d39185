"""Activations: ``npu_swiglu``, ``npu_geglu``, ``npu_gelu``, ``npu_fast_gelu`` (and ``fast_gelu``).

All compute in float32 and round once to the input dtype; all are differentiable on a real NPU
(NpuSwiglu, NpuGeglu, NpuGelu, NpuFastGelu / FastGelu), through the backward ops emulated here:
``npu_swiglu_backward``, ``npu_geglu_grad``, ``npu_gelu_backward``, ``npu_fast_gelu_backward``.
The traps they keep: ``npu_swiglu`` applies SiLU to the FIRST half (gate must come first),
``npu_geglu`` defaults to the tanh GELU, and ``npu_fast_gelu`` is ``x * sigmoid(1.702 x)``,
not GELU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._checks import check_dtypes, require
from ._common import FLOATS
from .registry import Derivative, npu_op

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


def _gelu_mode(approximate) -> str:
    """npu_geglu's int ``approximate`` (1 = tanh) as F.gelu's string."""
    return "tanh" if approximate in (1, "tanh") else "none"


def _keep_args(*names):
    """A ``Derivative.save`` that keeps ``self`` and the named non-tensor arguments."""

    def save(ctx, args, outputs):
        ctx.save_for_backward(args["self"])
        ctx.args = {name: args[name] for name in names}
        if isinstance(outputs, tuple):
            ctx.mark_non_differentiable(*outputs[1:])
    return save


def _backward_by(op_name: str, *arg_names):
    """A ``Derivative.grads`` that calls ``torch.ops.npu.<op_name>(grad, self, *args)``."""

    def grads(ctx, grad, *_unused):
        (x,) = ctx.saved_tensors
        return {"self": getattr(torch.ops.npu, op_name)(grad, x, *(ctx.args[n] for n in arg_names))}
    return grads


@npu_op(derivative=Derivative(_keep_args("dim"), _backward_by("npu_swiglu_backward", "dim")))
def npu_swiglu(self, dim=-1):
    """``A, B = self.chunk(2, dim)``; ``silu(A) * B`` (facts §2.5).

    Like the kernel, refuses non-contiguous and empty input: torch_npu's API page for
    ``npu_swiglu`` (Ascend Extension for PyTorch 7.2.0, "(beta)torch_npu.npu_swiglu") says of
    ``input`` "不支持非连续的Tensor，不支持空Tensor" (no non-contiguous tensor, no empty tensor). The
    contiguity rule is declared with the others in ``opmap/reference/torch_npu_contiguous_inputs.txt``
    and enforced by the registry.
    """
    op = "npu_swiglu"
    require(self.numel() > 0, op, f"self must not be empty, got shape {tuple(self.shape)}")
    a, b = _halves(op, self, dim)
    return (F.silu(a) * b).to(self.dtype)


@npu_op
def npu_swiglu_backward(grad_output, self, dim=-1):
    """The gradient of ``silu(A) * B`` with respect to ``self = [A | B]``: ``[g*B*silu'(A) | g*silu(A)]``
    with ``silu'(a) = s * (1 + a * (1 - s))``, ``s = sigmoid(a)``; in self's dtype."""
    a, b = self.float().chunk(2, dim=dim)
    g = grad_output.float()
    s = torch.sigmoid(a)
    return torch.cat((g * b * s * (1 + a * (1 - s)), g * a * s), dim=dim).to(self.dtype)


def _geglu_halves(activate_left: bool) -> bool:
    """True when the LEFT half goes through GELU (see GEGLU_DEFAULT_ACTIVATED_HALF)."""
    return activate_left if GEGLU_DEFAULT_ACTIVATED_HALF == "right" else not activate_left


def _save_geglu(ctx, args, outputs):
    ctx.mark_non_differentiable(outputs[1])  # npu_geglu_grad takes the gradient of out only
    ctx.save_for_backward(args["self"], outputs[1])
    ctx.args = (args["dim"], args["approximate"], args["activate_left"])


def _geglu_grads(ctx, grad, _dgelu):
    x, gelu = ctx.saved_tensors
    return {"self": torch.ops.npu.npu_geglu_grad(grad, x, gelu, *ctx.args)}


@npu_op(derivative=Derivative(_save_geglu, _geglu_grads))
def npu_geglu(self, dim=-1, approximate=1, activate_left=False):
    """``(out, gelu_half)``; ``approximate`` 1 (default) = tanh GELU, 0 = erf GELU.

    Which half is activated follows ``GEGLU_DEFAULT_ACTIVATED_HALF`` (see above).
    """
    op = "npu_geglu"
    require(approximate in (0, 1), op, f"approximate must be 0 (none) or 1 (tanh), got {approximate!r}")
    a, b = _halves(op, self, dim)
    gated, other = (a, b) if _geglu_halves(activate_left) else (b, a)
    gelu = F.gelu(gated, approximate=_gelu_mode(approximate))
    return (gelu * other).to(self.dtype), gelu.to(self.dtype)


@npu_op
def npu_geglu_grad(grad_output, self, gelu, dim=-1, approximate=1, activate_left=False):
    """The gradient of npu_geglu's ``out = gelu(G) * O`` with respect to ``self``: ``g * gelu'(G) * O``
    on the activated half G, ``g * gelu(G)`` on the other, O (``gelu`` is the forward's second output)."""
    a, b = self.float().chunk(2, dim=dim)
    left = _geglu_halves(activate_left)
    gated, other = (a, b) if left else (b, a)
    g = grad_output.float()
    d_gated = torch.ops.aten.gelu_backward(g * other, gated, approximate=_gelu_mode(approximate))
    d_other = g * gelu.float()
    return torch.cat((d_gated, d_other) if left else (d_other, d_gated), dim=dim).to(self.dtype)


def _gelu_grads(ctx, grad):
    (x,) = ctx.saved_tensors
    return {"self": torch.ops.npu.npu_gelu_backward(grad, x, approximate=ctx.args["approximate"])}


@npu_op(derivative=Derivative(_keep_args("approximate"), _gelu_grads))
def npu_gelu(self, *, approximate='none'):
    """Same as ``F.gelu`` (``approximate`` 'none' or 'tanh')."""
    op = "npu_gelu"
    check_dtypes(op, FLOATS, self=self)
    require(approximate in ("none", "tanh"), op, f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return F.gelu(self.float(), approximate=approximate).to(self.dtype)


@npu_op
def npu_gelu_backward(grad_output, self, *, approximate='none'):
    """``grad * gelu'(x)`` (erf or tanh form), in x's dtype."""
    return torch.ops.aten.gelu_backward(grad_output.float(), self.float(), approximate=approximate).to(self.dtype)


_FAST_GELU = Derivative(_keep_args(), _backward_by("npu_fast_gelu_backward"))


@npu_op(derivative=_FAST_GELU)
def npu_fast_gelu(self):
    """``x * sigmoid(1.702 x)`` - a sigmoid approximation, NOT erf/tanh GELU."""
    return _fast_gelu("npu_fast_gelu", self)


@npu_op(derivative=_FAST_GELU)
def fast_gelu(self):
    """The older name of ``npu_fast_gelu`` (also exported by torch_npu)."""
    return _fast_gelu("fast_gelu", self)


@npu_op
def npu_fast_gelu_backward(grad, self):
    """``grad * (s + 1.702 x s (1 - s))`` with ``s = sigmoid(1.702 x)``, in x's dtype."""
    x = self.float()
    s = torch.sigmoid(1.702 * x)
    return (grad.float() * (s + 1.702 * x * s * (1 - s))).to(self.dtype)
