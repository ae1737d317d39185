"""Layer norms: ``npu_layer_norm_eval`` (inference) and ``npu_add_layer_norm`` (fused residual add).

Both compute in float32 and round once to x's dtype; gamma/beta may be x's dtype or float32
(the aclnn dtype table allows a float32 weight with fp16/bf16 activations).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._checks import check_dtypes, check_same_dtype, dtype_name, refuse_autograd, require
from ._common import FLOATS, norm_dims
from .registry import Derivative, npu_op


def _check_weights(op: str, x: torch.Tensor, **weights) -> None:
    check_dtypes(op, FLOATS, **weights)
    for name, w in weights.items():
        if w is not None:
            require(
                w.dtype in (x.dtype, torch.float32), op,
                f"{name} dtype {dtype_name(w.dtype)} must be x's dtype or float32",
            )


@npu_op
def npu_layer_norm_eval(input, normalized_shape, weight=None, bias=None, eps=1e-05):
    """``F.layer_norm`` for inference; no backward on a real NPU."""
    op = "npu_layer_norm_eval"
    refuse_autograd(op, input, weight, bias)
    check_dtypes(op, FLOATS, input=input)
    _check_weights(op, input, weight=weight, bias=bias)
    shape = tuple(normalized_shape)
    require(
        tuple(input.shape[input.dim() - len(shape):]) == shape, op,
        f"normalized_shape {list(shape)} must equal the trailing dims of input {tuple(input.shape)}",
    )
    w = None if weight is None else weight.float()
    b = None if bias is None else bias.float()
    return F.layer_norm(input.float(), shape, w, b, eps).to(input.dtype)


def _save(ctx, args, outputs):
    _, mean, rstd, _ = outputs
    ctx.mark_non_differentiable(mean, rstd)
    ctx.save_for_backward(args["x1"], args["x2"], rstd, mean, args["gamma"], args["beta"])


def _grads(ctx, dy, _dmean, _drstd, dsum):
    x1, x2, rstd, mean, gamma, beta = ctx.saved_tensors
    dx1, dx2, dgamma, dbeta = torch.ops.npu.npu_add_layer_norm_backward(dy, x1, x2, rstd, mean, gamma, dsum)
    return {"x1": dx1, "x2": dx2, "gamma": dgamma.to(gamma.dtype), "beta": dbeta.to(beta.dtype)}


@npu_op(derivative=Derivative(_save, _grads))
def npu_add_layer_norm(x1, x2, gamma, beta, epsilon=1e-05, additional_output=False):
    """``(y, mean, rstd, x)`` of LayerNorm(x1 + x2); differentiable.

    mean/rstd are float32 with shape ``x.shape[:x.dim()-gamma.dim()] + [1]*gamma.dim()``.
    The 4th output ``x = x1 + x2`` is only written when ``additional_output=True``; otherwise the
    real kernel leaves that buffer uninitialised, emulated here as NaN so a caller that reads it
    fails parity instead of passing by luck.
    """
    op = "npu_add_layer_norm"
    check_dtypes(op, FLOATS, x1=x1, x2=x2)
    check_same_dtype(op, x1=x1, x2=x2)
    require(x1.shape == x2.shape, op, f"x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} must have the same shape")
    _check_weights(op, x1, gamma=gamma, beta=beta)
    require(gamma.shape == beta.shape, op,
            f"gamma {tuple(gamma.shape)} and beta {tuple(beta.shape)} must have the same shape")
    dims = norm_dims(op, x1, gamma)
    x = x1.float() + x2.float()
    var, mean = torch.var_mean(x, dim=dims, correction=0, keepdim=True)
    rstd = torch.rsqrt(var + epsilon)
    y = ((x - mean) * rstd * gamma.float() + beta.float()).to(x1.dtype)
    x_out = x.to(x1.dtype) if additional_output else torch.full_like(x1, float("nan"))
    return y, mean, rstd, x_out


@npu_op
def npu_add_layer_norm_backward(dy_opt, x1, x2, rstd, mean, gamma, dsum_opt):
    """``(dx1, dx2, dgamma, dbeta)`` of ``y = LayerNorm(x1 + x2)``, plus ``dsum_opt`` (the gradient
    of the returned sum x) added to dx; ``dy_opt`` None counts as 0. dx in x1's dtype (dx1 == dx2),
    dgamma/dbeta float32."""
    dims = norm_dims("npu_add_layer_norm_backward", x1, gamma)
    lead = tuple(range(x1.dim() - gamma.dim()))
    x = x1.float() + x2.float()
    xhat = (x - mean) * rstd
    dy = torch.zeros_like(x) if dy_opt is None else dy_opt.float()
    dxhat = dy * gamma.float()
    dx = rstd * (dxhat - dxhat.mean(dim=dims, keepdim=True) - xhat * (dxhat * xhat).mean(dim=dims, keepdim=True))
    if dsum_opt is not None:
        dx = dx + dsum_opt.float()
    reduce = (lambda t: t.sum(dim=lead)) if lead else (lambda t: t)  # noqa: E731
    return dx.to(x1.dtype), dx.to(x2.dtype, copy=True), reduce(dy * xhat), reduce(dy)
