"""Rotary position embedding (NPU310): pair rotary tables (torchtune's packed cache, complex
``freqs_cis``) are widened to per-channel tables on every call (S x D, not the activations); the
tables' values are not checked at all (the kernel takes any values). Under ``torch.autocast`` the
fused call computes in the promotion of x's and the tables' dtypes (its elementwise products are on
no autocast list).
"""

import math

import torch
import torch_npu

from .core import _FLOATS, _names, _record


# -- rotary position embedding ----------------------------------------------------------------------

#: npu_rotary_mul limits: D even and below ROTARY_MAX_HEAD_DIM; B and N (half) or B*N (interleave) below
#: ROTARY_MAX_BATCH_HEADS; B*N at most ROTARY_MAX_GRAD_BATCH_HEADS when cos/sin need gradients.
ROTARY_MAX_HEAD_DIM = 896
ROTARY_MAX_BATCH_HEADS = 1000
ROTARY_MAX_GRAD_BATCH_HEADS = 1024


def _folds(x, cos, mode):
    """Per-batch cos/sin in interleave mode, [B, S, 1, D] for a BSND x, are taken by the kernel once
    batch and sequence are merged into one sequence of B*S positions."""
    b, s, _, d = x.shape
    return mode == "interleave" and b > 1 and s > 1 and tuple(cos.shape) == (b, s, 1, d)


def _fold(t):
    return t.reshape(1, -1, *t.shape[2:])


def _layouts(shape, mode):
    """(batch, heads, cos/sin shapes) for each layout a 4-D x of ``shape`` may have."""
    d0, d1, d2, d = shape
    layouts = (
        (d0, d1, [(1, 1, d2, d), (d0, 1, d2, d)]),  # BNSD: 11SD, B1SD
        (d0, d2, [(1, d1, 1, d), (d0, d1, 1, d)]),  # BSND: 1S1D, BS1D
        (d1, d2, [(d0, 1, 1, d), (d0, d1, 1, d)]),  # SBND: S11D, SB1D
    )
    if mode == "interleave":
        return [(b, n, shapes[:1]) for b, n, shapes in layouts]
    return [(b, n, shapes + [tuple(shape)]) for b, n, shapes in layouts]


def _limits_hold(batch, heads, mode, grads):
    if grads and batch * heads > ROTARY_MAX_GRAD_BATCH_HEADS:
        return False
    if mode == "interleave":
        return batch * heads < ROTARY_MAX_BATCH_HEADS
    return batch < ROTARY_MAX_BATCH_HEADS and heads < ROTARY_MAX_BATCH_HEADS


def _table(t):
    """A 2-D or 3-D cos/sin table as the 4-D table it broadcasts as against a 4-D x (leading 1s:
    ``x * cos`` broadcasts so, and the kernel takes 11SD, 1S1D, S11D, ... tables)."""
    while t.dim() < 4:
        t = t.unsqueeze(0)
    return t


def rotary_fits(x, cos, sin, mode="half", *, when=True, site=None):
    """True when ``rotary_mul(x, cos, sin, mode)`` computes ``x * cos + rotate(x) * sin`` as the
    original code does: same result shape and dtype (float dtypes may differ: the call computes in
    their promotion, as the original's products do), no broadcasting the kernel lacks. Shapes,
    dtypes and devices only: the kernel computes ``x * r1 + rotate(x) * r2`` for any table values
    (torch_npu's npu_rotary_mul documentation states no range), so nothing about the tables'
    contents is checked, or remembered (scaled tables such as YaRN's fuse too). 2-D and 3-D
    tables count as the 4-D tables they broadcast as. ``site``: counted there."""
    return _record(site, _rotary_why(x, cos, sin, mode), when=when)


def _rotary_why(x, cos, sin, mode):
    if not all(torch.is_tensor(t) for t in (x, cos, sin)):
        return "x, cos and sin are not all tensors"
    if 2 <= cos.dim() < 4 and cos.shape == sin.shape:
        cos, sin = _table(cos), _table(sin)
    if x.dim() != 4 or cos.dim() != 4 or cos.shape != sin.shape or x.numel() == 0:
        return f"x {tuple(x.shape)} with tables {tuple(cos.shape)}, {tuple(sin.shape)}: not 4-D tables of one shape"
    if not all(t.dtype in _FLOATS for t in (x, cos, sin)):
        return f"x, cos, sin dtypes {_names(x, cos, sin)}"
    if not x.device == cos.device == sin.device:
        return "x, cos, sin on different devices"
    d = x.shape[-1]
    if d % 2 or d >= ROTARY_MAX_HEAD_DIM:
        return f"head dim {d}: odd or not below {ROTARY_MAX_HEAD_DIM}"
    if _folds(x, cos, mode):
        x, cos = _fold(x), _fold(cos)
    grads = torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad)
    layouts = [(b, n) for b, n, shapes in _layouts(x.shape, mode) if tuple(cos.shape) in shapes]
    if not layouts and _widens(x, cos, mode):
        layouts = [(b, n) for b, n, shapes in _layouts(x.shape, mode) if tuple(x.shape) in shapes]
    if not layouts:
        return f"tables {tuple(cos.shape)} fit no layout of x {tuple(x.shape)} ({mode} mode)"
    if not all(_limits_hold(b, n, mode, grads) for b, n in layouts):
        return "batch or heads over the kernel's limits"
    return None


def _widens(x, cos, mode):
    """Half-mode tables that broadcast to x without growing it but fit none of the kernel's table
    layouts (per-head tables [1, N, S, D], ...): the kernel takes them expanded to x's shape."""
    return mode == "half" and cos.dim() == x.dim() and all(c in (1, n) for c, n in zip(cos.shape, x.shape))


def rotary_mul(x, cos, sin, mode="half"):
    """``torch_npu.npu_rotary_mul`` for inputs ``rotary_fits`` accepted, in the dtype the original's
    elementwise products promote to (a bfloat16 x under autocast with float32 tables, as Llama's are:
    float32; ``*`` and ``+`` are on no autocast list, so type promotion decides): x and the tables
    are cast to it (exact: a widening cast), so the kernel computes in the original's precision."""
    dtype = torch.promote_types(torch.promote_types(x.dtype, cos.dtype), sin.dtype)
    x, cos, sin = (t if t.dtype == dtype else t.to(dtype) for t in (x, cos, sin))
    cos, sin = _table(cos), _table(sin)
    if _folds(x, cos, mode):
        return torch_npu.npu_rotary_mul(_fold(x), _fold(cos), _fold(sin), mode).reshape(x.shape)
    if not any(tuple(cos.shape) in shapes for _, _, shapes in _layouts(x.shape, mode)):  # rotary_fits: _widens
        cos, sin = cos.expand(x.shape).contiguous(), sin.expand(x.shape).contiguous()
    return torch_npu.npu_rotary_mul(x, cos, sin, mode)


# Pair tables: code that keeps one cos and one sin per rotated pair, D/2 wide (torchtune's packed
# cache, ChatGLM, Meta/Mistral's complex freqs_cis), rather than one per channel as npu_rotary_mul
# takes them. The per-channel tables are derived from the pair tables' current values on every call
# (a copy of the tables, S x D, not of the activations): a table kept from an earlier call could be
# stale, since a buffer changes through ``.data`` or ``load_state_dict`` without a new identity.


def _widen(cos, sin, mode, dtype):
    """Per-channel (cos, sin) from pair tables: 'interleave' repeats each pair's value in place
    ([c0, c0, c1, c1, ...]), 'half' repeats the table ([c0, c1, ..., c0, c1, ...])."""
    def wide(t):
        t = t.to(dtype)
        return t.repeat_interleave(2, dim=-1) if mode == "interleave" else torch.cat((t, t), dim=-1)

    return wide(cos), wide(sin)


def _pair_layout(x, cos, sin, mode, paired):
    """(x as [.., D] of 4 dims, per-channel tables shape of 4 dims, result dtype), or None when the
    shapes or dtypes are not a pair rotation npu_rotary_mul can compute."""
    if not all(torch.is_tensor(t) for t in (x, cos, sin)) or cos.shape != sin.shape:
        return None
    if x.is_complex() or cos.is_complex() or sin.is_complex() or not x.device == cos.device == sin.device:
        return None
    dtype = torch.promote_types(torch.promote_types(x.dtype, cos.dtype), sin.dtype)
    if dtype not in _FLOATS or (paired and (x.dim() < 2 or x.shape[-1] != 2)):
        return None
    shape = (*x.shape[:-2], 2 * x.shape[-2]) if paired else tuple(x.shape)
    if len(shape) < 3 or math.prod(shape) == 0 or shape[-1] % 2 or shape[-1] >= ROTARY_MAX_HEAD_DIM:
        return None
    pairs = (*shape[:-1], shape[-1] // 2)  # one angle per pair: the tables broadcast to this, never beyond it
    if cos.dim() > len(pairs) or cos.shape[-1] != pairs[-1] or any(
            c not in (1, p) for c, p in zip(cos.shape[::-1], pairs[::-1])):
        return None
    x_shape = (1,) * (4 - len(shape)) + shape
    table_shape = (1,) * (len(x_shape) - cos.dim()) + (*cos.shape[:-1], shape[-1])
    while len(x_shape) > 4:  # leading dims the tables repeat over (or share with x) merge into one
        (a, b, *x_rest), (ta, tb, *t_rest) = x_shape, table_shape
        if (ta, tb) not in ((1, 1), (a, b)):
            return None
        x_shape, table_shape = (a * b, *x_rest), (ta * tb, *t_rest)
    return x_shape, table_shape, dtype


def pair_rotary_fits(x, cos, sin, mode="interleave", *, paired=False, split=False, when=True, site=None):
    """True when ``pair_rotary_mul`` computes the pair rotation the original code writes out:
    ``mode`` 'interleave' rotates channels (2i, 2i+1), 'half' channels (i, i + D/2), each pair by
    ``cos[..., i]`` and ``sin[..., i]`` (tables D/2 wide, broadcasting to x without growing it):
    ``(a, b) -> (a * cos - b * sin, b * cos + a * sin)``. ``paired``: x is [..., D/2, 2] (channel
    pairs on the last dim, the result too). ``split`` ('interleave' only): the result holds the
    rotated even channels, then the rotated odd ones (DeepSeek's
    ``cat([x0 * cos - x1 * sin, x1 * cos + x0 * sin], -1)``). x has 3 or more dims as [..., D]; the
    result has the dtype the original's products promote to. Leading dims beyond 4 merge into one
    where the tables repeat over them (torchtune's tiled vision rotary: [b, tiles, s, n, D]).
    ``site``: counted there."""
    return _record(site, _pair_rotary_why(x, cos, sin, mode, paired, split), when=when)


def _pair_rotary_why(x, cos, sin, mode, paired, split):
    if split and (mode != "interleave" or paired):
        return "a split rotation in half mode or of paired channels"
    mode = "half" if split else mode  # the even/odd channels put side by side turn as halves
    layout = _pair_layout(x, cos, sin, mode, paired)
    if layout is None:
        return "x and the pair tables are not a pair rotation the kernel computes (shape, dtype or device)"
    (b0, b1, b2, d), table, dtype = layout
    x_shape = (b0, b1, b2, d)
    if mode == "interleave" and b0 > 1 and b1 > 1 and table == (b0, b1, 1, d):  # per-batch BS1D: fold B into S
        x_shape, table = (1, b0 * b1, b2, d), (1, b0 * b1, 1, d)
    grads = torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad)
    layouts = [(b, n) for b, n, shapes in _layouts(x_shape, mode) if table in shapes]
    if not layouts:
        return f"tables {table} fit no layout of x {x_shape} ({mode} mode)"
    if not all(_limits_hold(b, n, mode, grads) for b, n in layouts):
        return "batch or heads over the kernel's limits"
    return None


def pair_rotary_mul(x, cos, sin, mode="interleave", *, paired=False, split=False):
    """``npu_rotary_mul`` for inputs ``pair_rotary_fits`` accepted, shaped and typed as the original's result."""
    if split:  # one copy: the even channels, then the odd ones, rotated as halves
        x, mode = torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1), "half"
    x_shape, table_shape, dtype = _pair_layout(x, cos, sin, mode, paired)
    wide_cos, wide_sin = _widen(cos, sin, mode, dtype)
    full = x.to(dtype).reshape(x_shape)
    out = rotary_mul(full, wide_cos.reshape(table_shape), wide_sin.reshape(table_shape), mode)
    return out.reshape(x.shape)


def rotary_fits_cast(x, dtype, cos, sin, mode="half", *, when=True, site=None):
    """``rotary_fits`` for x cast to ``dtype`` (code that rotates ``x.float()``), without making the
    cast: only x's shape and device are read."""
    if not torch.is_tensor(x) or not isinstance(dtype, torch.dtype):
        return _record(site, "x is not a tensor or the cast not to a dtype")
    return rotary_fits(torch.empty((), dtype=dtype, device=x.device).expand(x.shape), cos, sin, mode, when=when,
                       site=site)


def complex_rotary_fits(x, freqs_cis, *, when=True, site=None):
    """True when ``complex_rotary_mul(x, freqs_cis)`` computes ``torch.view_as_real(x * freqs_cis)``:
    x (channel pairs as complex numbers, [..., D/2]) and freqs_cis (unit complex numbers,
    ``torch.polar(ones, angles)``) complex64, freqs_cis broadcasting to x without growing it."""
    if not (torch.is_tensor(x) and torch.is_tensor(freqs_cis) and x.dtype == freqs_cis.dtype == torch.complex64):
        return _record(site, "x and freqs_cis are not both complex64 tensors")
    return pair_rotary_fits(torch.view_as_real(x), freqs_cis.real, freqs_cis.imag, "interleave", paired=True,
                            when=when, site=site)


def complex_rotary_mul(x, freqs_cis):
    """``torch.view_as_real(x * freqs_cis)`` on npu_rotary_mul ('interleave' mode: the complex
    product rotates each pair of channels), for inputs ``complex_rotary_fits`` accepted."""
    return pair_rotary_mul(torch.view_as_real(x), freqs_cis.real, freqs_cis.imag, "interleave", paired=True)
