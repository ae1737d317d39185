"""RMS norms: ``npu_rms_norm``, ``npu_add_rms_norm``, ``npu_gemma_rms_norm``.

The kernels compute in float32 and round once to x's dtype (facts §2.5: ``rstd = rsqrt(mean(x.float()
** 2, gamma's dims) + eps); y = (x.float() * rstd * gamma.float()).to(x.dtype)``). Hugging Face
``LlamaRMSNorm`` rounds the normalised value to the input dtype before multiplying by the weight,
so expect ~1 ulp differences in bf16/fp16. ``rstd`` is float32 with shape
``x.shape[:x.dim() - gamma.dim()] + [1] * gamma.dim()`` (facts §2.5, meta).

gamma is in x's dtype, except that ``npu_rms_norm`` also takes a float32 gamma with float16 /
bfloat16 x and still returns y in x's dtype: torch_npu's own test ``test_rms_norm_mix_dtype``
(x float16 [1024, 12288], gamma float32) checks exactly that against a float32 golden rounded to
x's dtype. The other two norms document no mixed case and refuse it.
"""

from __future__ import annotations

import torch

from ._checks import check_dtypes, check_same_dtype, refuse_autograd, require
from ._common import FLOATS, norm_dims, require_gamma_dtype
from .registry import Derivative, npu_op


def _rms(op: str, x: torch.Tensor, gamma: torch.Tensor, epsilon: float, min_dim: int, xf=None,
         float32_gamma: bool = False):
    """Checks shared by the three norms; returns (x in float32, rstd).

    ``xf`` overrides the float32 value that is normalised (the unrounded sum in add_rms_norm).
    """
    check_dtypes(op, FLOATS, x=x, gamma=gamma)
    require_gamma_dtype(op, x, gamma, float32_gamma)
    dims = norm_dims(op, x, gamma, min_dim=min_dim)
    xf = x.float() if xf is None else xf
    rstd = torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + epsilon)
    return xf, rstd


def _save(ctx, args, outputs):
    ctx.mark_non_differentiable(outputs[1])
    ctx.save_for_backward(args["self"], args["gamma"], outputs[1])


def _grads(ctx, dy, _drstd):
    x, gamma, rstd = ctx.saved_tensors
    dx, dgamma = torch.ops.npu.npu_rms_norm_backward(dy, x, gamma, rstd)
    return {"self": dx, "gamma": dgamma.to(gamma.dtype)}


@npu_op(derivative=Derivative(_save, _grads))
def npu_rms_norm(self, gamma, epsilon=1e-06):
    """``(y, rstd)`` with ``y = x * rstd * gamma`` in x's dtype; x 2-8 D; gamma in x's dtype or
    float32 (with float16/bfloat16 x). Differentiable (NpuRmsNorm): the backward is
    ``npu_rms_norm_backward(dy, x, gamma, rstd)``, which takes no gradient for rstd (not
    differentiable here either)."""
    xf, rstd = _rms("npu_rms_norm", self, gamma, epsilon, min_dim=2, float32_gamma=True)
    return (xf * rstd * gamma.float()).to(self.dtype), rstd


@npu_op
def npu_rms_norm_backward(dy, self, gamma, rstd):
    """``(dx in x's dtype, dgamma float32)`` of ``y = x * rstd * gamma`` for the forward's rstd
    (facts §2.5: ``npu_rms_norm_backward(dy, self, gamma, rstd) -> (dx [x dtype], dgamma [f32])``):
    ``dx = rstd * (dy*gamma - x * rstd**2 * mean(dy*gamma*x))`` over gamma's dims, ``dgamma = sum(dy*x*rstd)``
    over the others."""
    dims = norm_dims("npu_rms_norm_backward", self, gamma, min_dim=2)
    xf, g = self.float(), gamma.float()
    dyg = dy.float() * g
    dx = rstd * (dyg - xf * rstd.pow(2) * (dyg * xf).mean(dim=dims, keepdim=True))
    lead = tuple(range(self.dim() - gamma.dim()))
    dgamma = (dy.float() * xf * rstd).sum(dim=lead) if lead else dy.float() * xf * rstd
    return dx.to(self.dtype), dgamma


@npu_op
def npu_add_rms_norm(x1, x2, gamma, epsilon=1e-06):
    """``(y, rstd, x1 + x2)``: the residual add fused before the norm; inference only (no backward)."""
    op = "npu_add_rms_norm"
    refuse_autograd(op, x1, x2, gamma)
    check_dtypes(op, FLOATS, x1=x1, x2=x2)
    check_same_dtype(op, x1=x1, x2=x2)
    require(x1.shape == x2.shape, op, f"x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} must have the same shape")
    # The kernel normalises the float32 sum; only the returned x is rounded.
    xf, rstd = _rms(op, x1, gamma, epsilon, min_dim=1, xf=x1.float() + x2.float())
    return (xf * rstd * gamma.float()).to(x1.dtype), rstd, xf.to(x1.dtype)


@npu_op
def npu_gemma_rms_norm(self, gamma, epsilon=1e-06):
    """Gemma style ``(y, rstd)`` with ``y = x * rstd * (1 + gamma)``; no backward on a real NPU."""
    op = "npu_gemma_rms_norm"
    refuse_autograd(op, self, gamma)
    xf, rstd = _rms(op, self, gamma, epsilon, min_dim=1)
    return (xf * rstd * (1.0 + gamma.float())).to(self.dtype), rstd
