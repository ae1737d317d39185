"""Rotary position embedding: ``npu_rotary_mul`` and ``npu_apply_rotary_pos_emb``.

Both compute ``x * cos + rotate(x) * sin`` in float32 and round once to the input dtype.
``'half'`` rotates like Hugging Face ``rotate_half`` (NeoX style: ``cat(-x2, x1)`` of the two
halves); ``'interleave'`` rotates GPT-J style pairs ``(x[2i], x[2i+1]) -> (-x[2i+1], x[2i])``.
Mixing them up gives different numbers, as on a real NPU.
"""

from __future__ import annotations

import torch

from ._checks import NpuOpError, check_dtypes, check_same_dtype, refuse_autograd, require
from ._common import FLOATS
from .registry import Derivative, npu_op


def _rotate(x: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "half":
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def _rotate_transposed(g: torch.Tensor, mode: str) -> torch.Tensor:
    """The transpose of the linear map ``_rotate``: half ``(g1, g2) -> (g2, -g1)``, interleave
    ``(g[2i], g[2i+1]) -> (g[2i+1], -g[2i])``."""
    if mode == "half":
        g1, g2 = g.chunk(2, dim=-1)
        return torch.cat((g2, -g1), dim=-1)
    return torch.stack((g[..., 1::2], -g[..., ::2]), dim=-1).flatten(-2)


def _sum_to(t: torch.Tensor, shape) -> torch.Tensor:
    """``t`` summed over the dims where ``shape`` broadcasts (size 1)."""
    dims = tuple(i for i, (a, b) in enumerate(zip(t.shape, shape)) if b == 1 and a != 1)
    return t.sum(dim=dims, keepdim=True) if dims else t


def _allowed_r_shapes(shape, mode: str) -> list:
    """cos/sin shapes the kernel accepts for a 4-D input, over its layouts BNSD, BSND, SBND (a list:
    the sizes may be symbolic while tracing)."""
    d0, d1, d2, d = shape
    broadcast_seq = [(1, 1, d2, d), (1, d1, 1, d), (d0, 1, 1, d)]  # 11SD, 1S1D, S11D
    if mode == "interleave":
        return broadcast_seq
    per_batch = [(d0, 1, d2, d), (d0, d1, 1, d)]  # B1SD, BS1D / SB1D
    return broadcast_seq + per_batch + [tuple(shape)]


def _save(ctx, args, outputs):
    if args["rotate"] is not None:
        raise NpuOpError("npu_rotary_mul with rotate has no backward on a real NPU (npu_rotary_mul_backward "
                         "ignores rotate); use it only on inference paths")
    ctx.save_for_backward(args["self"], args["r1"], args["r2"])
    ctx.mode = args["rotary_mode"]


def _grads(ctx, grad):
    x, r1, r2 = ctx.saved_tensors
    dx, dr1, dr2 = torch.ops.npu.npu_rotary_mul_backward(grad, x, r1, r2, ctx.mode)
    return {"self": dx, "r1": dr1, "r2": dr2}


@npu_op(derivative=Derivative(_save, _grads))
def npu_rotary_mul(self, r1, r2, rotary_mode='half', rotate=None):
    """``out = self * r1 + rotate(self) * r2`` (r1 = cos, r2 = sin); differentiable (NpuRotaryMul,
    backward ``npu_rotary_mul_backward``).

    With ``rotate`` (a ``[D, D]`` matrix), ``rotate(x) = x @ rotate``; the real backward ignores
    ``rotate``, so gradients through that variant are refused rather than silently wrong.
    """
    op = "npu_rotary_mul"
    x = self
    check_dtypes(op, FLOATS, self=x, r1=r1, r2=r2, rotate=rotate)
    check_same_dtype(op, self=x, r1=r1, r2=r2)
    require(rotary_mode in ("half", "interleave"), op,
            f"rotary_mode must be 'half' or 'interleave', got {rotary_mode!r}")
    require(x.dim() == 4, op, f"self must be 4-D (BNSD, BSND or SBND), got {x.dim()}-D")
    d = x.shape[-1]
    require(d % 2 == 0 and d < 896, op, f"head dim D must be even and < 896, got {d}")
    require(r1.shape == r2.shape, op, f"r1 {tuple(r1.shape)} and r2 {tuple(r2.shape)} must have the same shape")
    allowed = _allowed_r_shapes(tuple(x.shape), rotary_mode)
    require(
        r1.dim() == 4 and tuple(r1.shape) in allowed, op,
        f"r1/r2 shape {tuple(r1.shape)} does not broadcast to self {tuple(x.shape)} in {rotary_mode!r} mode "
        f"(allowed: {allowed}); HF cos/sin [B,S,D] need unsqueeze(1) for BNSD or unsqueeze(2) for BSND",
    )
    xf = x.float()
    if rotate is not None:
        require(rotate.shape == (d, d), op, f"rotate must be [D, D] = [{d}, {d}], got {tuple(rotate.shape)}")
        refuse_autograd(op + " with rotate", x, r1, r2, rotate)
        rotated = xf @ rotate.float()
    else:
        rotated = _rotate(xf, rotary_mode)
    return (xf * r1.float() + rotated * r2.float()).to(x.dtype)


@npu_op
def npu_rotary_mul_backward(grad, self, r1, r2, rotary_mode='half'):
    """``(dx, dr1, dr2)`` of ``out = x * r1 + rotate(x) * r2``: ``dx = grad * r1 + rotate^T(grad * r2)``,
    ``dr1 = grad * x`` and ``dr2 = grad * rotate(x)`` summed to r1's / r2's (broadcast) shape; all in
    x's dtype (meta: dx like self, dr1/dr2 like cosine/sine in the embedding's dtype)."""
    g, xf = grad.float(), self.float()
    dx = g * r1.float() + _rotate_transposed(g * r2.float(), rotary_mode)
    dr1 = _sum_to(g * xf, r1.shape)
    dr2 = _sum_to(g * _rotate(xf, rotary_mode), r2.shape)
    return dx.to(self.dtype), dr1.to(self.dtype), dr2.to(self.dtype)


def _check_apply(query, key, cos, sin, layout, rotary_mode):
    op = "npu_apply_rotary_pos_emb"
    refuse_autograd(op, query, key, cos, sin)
    check_dtypes(op, FLOATS, query=query, key=key, cos=cos, sin=sin)
    check_same_dtype(op, query=query, key=key, cos=cos, sin=sin)
    require(layout in ("BSND", "TND"), op, f"layout must be 'BSND' or 'TND' on Atlas A2/A3, got {layout!r}")
    require(rotary_mode == "half", op, f"only rotary_mode='half' is supported on Atlas A2/A3, got {rotary_mode!r}")
    ndim = 4 if layout == "BSND" else 3
    for name, t in (("query", query), ("key", key), ("cos", cos), ("sin", sin)):
        require(t.dim() == ndim, op, f"{name} must be {ndim}-D for layout {layout}, got {t.dim()}-D")
        require(t.numel() > 0, op, f"{name} must not be empty")
    d = query.shape[-1]
    require(d in (64, 128), op, f"head dim D must be 64 or 128, got {d}")
    require(key.shape[-1] == d, op, f"key head dim {key.shape[-1]} must equal query head dim {d}")
    lead = tuple(query.shape[:-2])  # (B, S) or (T,)
    require(tuple(key.shape[:-2]) == lead, op,
            f"key {tuple(key.shape)} must share {layout[:-2]} with query {tuple(query.shape)}")
    rope_shape = lead + (1, d)
    for name, t in (("cos", cos), ("sin", sin)):
        require(
            tuple(t.shape) == rope_shape, op,
            f"{name} must have shape {rope_shape} ({layout[:-2]}1D), got {tuple(t.shape)}",
        )


def _apply_fake(query, key, cos, sin, layout='BSND', rotary_mode='half'):
    """Fresh outputs for tracing: the in-place update is the eager kernel's, not in the schema."""
    _check_apply(query, key, cos, sin, layout, rotary_mode)
    return torch.empty_like(query), torch.empty_like(key)


@npu_op(fake=_apply_fake)
def npu_apply_rotary_pos_emb(query, key, cos, sin, layout='BSND', rotary_mode='half'):
    """RoPE on query and key in one call, updating both IN PLACE and returning them.

    Atlas A2/A3 limits: layout BSND (4-D) or TND (3-D), ``'half'`` only, D in {64, 128},
    cos/sin ``(B, S, 1, D)`` (TND: ``(T, 1, D)``), one dtype for all four; no backward (facts §2.4).
    All four must be contiguous tensors ("要求为连续的Tensor", opmap/reference/
    torch_npu_contiguous_inputs.txt; the registry refuses others), so the update writes exactly the
    caller's elements, at any storage offset. Both results are computed before either is written,
    so a query and key that share memory are each rotated once, from the values passed in.
    The schema declares no mutation (``-> (Tensor, Tensor)``), as in torch_npu: traced graphs see
    two new outputs, eager code sees its query and key changed.
    """
    _check_apply(query, key, cos, sin, layout, rotary_mode)
    c, s = cos.float(), sin.float()
    rotated = [(tf * c + _rotate(tf, "half") * s) for tf in (query.float(), key.float())]
    for t, value in zip((query, key), rotated):
        t.copy_(value)
    return query, key
