"""Rotary position embedding glue for code migrated to Ascend NPUs by npu-migrate (vendored: part
of your diff, edit freely).

``torch_npu.npu_rotary_mul(x, cos, sin, mode)`` computes ``x * cos + rotate(x) * sin`` only for
a 4-D float ``x`` with an even head dim below 896, cos/sin of x's dtype in [-1, 1] and of one of
the shapes its layout takes (BNSD x: 11SD, B1SD, BNSD; BSND: 1S1D, BS1D, BSND; SBND: S11D, SB1D,
SBND; ``'interleave'`` only the first of each). Every migrated site checks ``fits`` and runs its
original code when it is False. Imports only torch and torch_npu.
"""

import torch
import torch_npu

#: npu_rotary_mul limits: D even and below MAX_HEAD_DIM; B and N (half) or B*N (interleave) below
#: MAX_BATCH_HEADS; B*N at most MAX_GRAD_BATCH_HEADS when cos/sin need gradients.
MAX_HEAD_DIM = 896
MAX_BATCH_HEADS = 1000
MAX_GRAD_BATCH_HEADS = 1024
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)


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
    if grads and batch * heads > MAX_GRAD_BATCH_HEADS:
        return False
    if mode == "interleave":
        return batch * heads < MAX_BATCH_HEADS
    return batch < MAX_BATCH_HEADS and heads < MAX_BATCH_HEADS


def fits(x, cos, sin, mode="half"):
    """True when ``rotary_mul(x, cos, sin, mode)`` computes ``x * cos + rotate(x) * sin`` as the
    original code does (same result shape and dtype, no broadcasting the kernel lacks)."""
    if not all(torch.is_tensor(t) for t in (x, cos, sin)):
        return False
    if x.dim() != 4 or cos.dim() != 4 or cos.shape != sin.shape or x.numel() == 0:
        return False
    if x.dtype not in _FLOATS or not x.dtype == cos.dtype == sin.dtype or not x.device == cos.device == sin.device:
        return False
    d = x.shape[-1]
    if d % 2 or d >= MAX_HEAD_DIM:
        return False
    if _folds(x, cos, mode):
        x, cos = _fold(x), _fold(cos)
    grads = torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad)
    layouts = [(b, n) for b, n, shapes in _layouts(x.shape, mode) if tuple(cos.shape) in shapes]
    if not layouts or not all(_limits_hold(b, n, mode, grads) for b, n in layouts):
        return False
    with torch.no_grad():
        return bool((cos.abs() <= 1).all() and (sin.abs() <= 1).all())


def rotary_mul(x, cos, sin, mode="half"):
    """``torch_npu.npu_rotary_mul`` for inputs ``fits`` accepted."""
    if _folds(x, cos, mode):
        return torch_npu.npu_rotary_mul(_fold(x), _fold(cos), _fold(sin), mode).reshape(x.shape)
    return torch_npu.npu_rotary_mul(x, cos, sin, mode)
