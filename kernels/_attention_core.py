"""The attention core shared by the emulated NPU attention ops.

One dense problem: ``q [B, Nq, Sq, D]``, ``k [B, Nkv, Skv, D]``, ``v [B, Nkv, Skv, Dv]`` (BNSD,
Nq a multiple of Nkv), plus a :class:`Problem` that says how the logits are scaled, biased and
masked. :func:`attention` computes it the FlashAttention way: key/value blocks with an online
softmax, in float32 whatever the input dtype, so memory grows linearly in S (one score block of
at most ``SCORE_BLOCK_ELEMENTS`` floats lives at a time), and it yields the exact row max and
row sum that the NPU kernels return as softmax_max / softmax_sum (``npu_fusion_attention`` takes
torch's fused SDPA kernel instead where the call is an SDPA call: ``_fusion_attention_sdpa``).
GQA is done without repeating K/V: the G = Nq/Nkv query heads that share a KV head are folded
into the rows of one matmul.

Backward (FA2 style) recomputes the score blocks from the saved row max/sum, so training memory
stays linear too.

Masking follows the NPU kernels: a masked logit is replaced by the large negative ``MASKED``
(never -inf). A row whose logits are all masked therefore gets a uniform softmax over its keys,
i.e. the mean of V: the "precision loss" that the real kernels' invalid-row correction
(``inner_precise=2`` for FA) exists to fix; with ``Problem.zero_dead_rows`` such rows are 0
instead. Either way no NaN appears. (For a dead row the emulator returns that mean of V without
dropout; its softmax max/sum are reported as ``MASKED`` / ``Skv``.)

The helpers for layouts, masks and sparse modes that the ops share live here too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator, Optional, Tuple

import torch
from torch.utils.weak import WeakIdKeyDictionary

from ._checks import dtype_name, require

INT_MAX = 2147483647
#: The logit a masked position gets (float32 "large negative", as in the NPU kernels).
MASKED = -1e30
#: Key/value block length, and the most score floats one block may hold (16 MiB in float32); the
#: query block is as tall as that allows (512 rows for 8 heads). Tuned on a 2-core CPU with
#: ``benchmarks/attention.py`` against SDPA (smaller blocks pay Python and small-matmul overhead,
#: larger ones leave the cache). ``BLOCK_Q`` > 0 fixes the query block instead (tests shrink all
#: three to force many blocks).
BLOCK_KV = 1024
SCORE_BLOCK_ELEMENTS = 1 << 22
BLOCK_Q = 0
#: Side of the compressed causal mask that sparse modes 2/3/4 take.
COMPRESSED_MASK_SIZE = 2048


# --------------------------------------------------------------------------- layouts

def to_bnsd(x: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    """View a BSH/SBH/BSND/BNSD tensor as [B, N, S, D] (no copy); ``heads`` splits H."""
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "BSH":
        b, s, h = x.shape
        return x.view(b, s, heads, h // heads).transpose(1, 2)
    if layout == "SBH":
        s, b, h = x.shape
        return x.view(s, b, heads, h // heads).permute(1, 2, 0, 3)
    raise ValueError(layout)


def from_bnsd(x: torch.Tensor, layout: str) -> torch.Tensor:
    """The inverse of :func:`to_bnsd` (a contiguous tensor in ``layout``)."""
    b, n, s, d = x.shape
    if layout == "BNSD":
        return x.contiguous()
    if layout == "BSND":
        return x.transpose(1, 2).contiguous()
    if layout == "BSH":
        return x.transpose(1, 2).reshape(b, s, n * d)
    if layout == "SBH":
        return x.permute(2, 0, 1, 3).reshape(s, b, n * d)
    raise ValueError(layout)


# --------------------------------------------------------------------------- masks

def bool_mask(op: str, mask: torch.Tensor, allowed=(torch.bool, torch.uint8)) -> torch.Tensor:
    """An NPU attention mask (1/True = masked OUT) as bool; float (additive) masks are refused."""
    require(
        not mask.is_floating_point(), op,
        f"atten_mask must be bool/uint8 with True/1 = masked out; got an additive float mask "
        f"({dtype_name(mask.dtype)}). Convert it with `mask < 0`, or pass it as pse",
    )
    names = "/".join(dtype_name(d) for d in allowed)
    require(mask.dtype in allowed, op, f"atten_mask must be {names}, got {dtype_name(mask.dtype)}")
    return mask if mask.dtype == torch.bool else mask != 0


@lru_cache(maxsize=1)
def _compressed_causal() -> torch.Tensor:
    n = COMPRESSED_MASK_SIZE
    return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)


def check_compressed_mask_shape(op: str, mask: torch.Tensor, sparse_mode: int) -> None:
    """Sparse modes 2/3/4 take a 2048 x 2048 mask (leading dims of size 1)."""
    n = COMPRESSED_MASK_SIZE
    shape = tuple(mask.shape)
    require(
        mask.dim() >= 2 and shape[-2:] == (n, n) and all(s == 1 for s in shape[:-2]), op,
        f"sparse_mode={sparse_mode} needs the compressed {n}x{n} mask "
        f"torch.triu(torch.ones({n}, {n}), diagonal=1).bool(); got shape {shape}",
    )


#: mask tensor -> its version counter when it was found to be the compressed mask
_COMPRESSED_SEEN = WeakIdKeyDictionary()


def check_compressed_mask(op: str, mask: torch.Tensor, sparse_mode: int) -> None:
    """Sparse modes 2/3/4 take the compressed ``triu(ones(2048, 2048), 1)`` mask, nothing else.
    Checked once per mask tensor and version (a 4M-element compare costs more than attention at
    S = 1024); an in-place change, or a new tensor, is checked again."""
    n = COMPRESSED_MASK_SIZE
    check_compressed_mask_shape(op, mask, sparse_mode)
    version = None if mask.is_inference() else mask._version  # inference tensors have no version
    if version is not None and _COMPRESSED_SEEN.get(mask) == version:
        return
    require(
        torch.equal(mask.reshape(n, n), _compressed_causal()), op,
        f"sparse_mode={sparse_mode}: atten_mask must equal torch.triu(torch.ones({n}, {n}), diagonal=1) "
        "(True = masked); this one differs",
    )
    if version is not None:
        _COMPRESSED_SEEN[mask] = version


@dataclass(frozen=True)
class Band:
    """Keep key j for query i iff ``-pre <= j - i - anchor <= next``.

    ``anchor`` is 0 for a band anchored top-left, ``Skv - Sq`` for one anchored bottom-right.
    """

    pre: int
    next: int
    anchor: int = 0

    def _offsets(self, q0: int, q1: int, k0: int, k1: int) -> Tuple[int, int]:
        return k0 - (q1 - 1) - self.anchor, (k1 - 1) - q0 - self.anchor

    def masks_all(self, q0: int, q1: int, k0: int, k1: int) -> bool:
        lo, hi = self._offsets(q0, q1, k0, k1)
        return lo > self.next or hi < -self.pre

    def block(self, q0: int, q1: int, k0: int, k1: int, device: torch.device) -> Optional[torch.Tensor]:
        """The [bq, bk] masked-out positions of a block, or None when the band keeps it whole."""
        lo, hi = self._offsets(q0, q1, k0, k1)
        if hi <= self.next and lo >= -self.pre:
            return None
        return _band_block(q1 - q0, k1 - k0, k0 - q0 - self.anchor, self.pre, self.next, device)


@lru_cache(maxsize=64)
def _band_block(rows: int, cols: int, offset: int, pre: int, next_: int, device: torch.device) -> torch.Tensor:
    """Masked-out positions of a block whose key j and query i are ``offset + j - i`` apart: one
    pattern per diagonal offset, so the equal-sized diagonal blocks of a causal problem share it."""
    d = torch.arange(cols, device=device)[None, :] - torch.arange(rows, device=device)[:, None] + offset
    return (d > next_) | (d < -pre)


def sparse_band(sparse_mode: int, pre: int, next_: int, sq: int, skv: int) -> Optional[Band]:
    """The band a sparse mode (0-4) adds on top of (mode 0/1) or instead of (2/3/4) the mask."""
    if sparse_mode == 0:
        return None if pre >= INT_MAX and next_ >= INT_MAX else Band(pre, next_, 0)
    if sparse_mode == 1:
        return None
    if sparse_mode == 2:
        return Band(INT_MAX, 0, 0)
    if sparse_mode == 3:
        return Band(INT_MAX, 0, skv - sq)
    if sparse_mode == 4:
        return Band(pre, next_, skv - sq)
    raise ValueError(sparse_mode)


def group_heads(t: Optional[torch.Tensor], nkv: int) -> Optional[torch.Tensor]:
    """[b, n, s, s'] (n = 1 or Nq) -> [b, Nkv or 1, G or 1, s, s'] to broadcast over grouped scores."""
    if t is None:
        return None
    b, n, s, s2 = t.shape
    return t.view(b, 1, 1, s, s2) if n == 1 else t.view(b, nkv, n // nkv, s, s2)


# --------------------------------------------------------------------------- the core

@dataclass
class Problem:
    """How the logits of one dense problem are formed.

    ``mask`` / ``pse``: 5-D, broadcastable to [B, Nkv, G, Sq, Skv] (see :func:`group_heads`).
    Logits are ``scale * (q k^T + pse)`` when ``pse_scaled`` (FA's pse_type=1) else
    ``scale * q k^T + pse`` (the inference ops' pse_shift).
    """

    scale: float = 1.0
    mask: Optional[torch.Tensor] = None
    band: Optional[Band] = None
    pse: Optional[torch.Tensor] = None
    pse_scaled: bool = True
    keep_prob: float = 1.0
    seed: int = 0
    zero_dead_rows: bool = False
    block_q: int = 0  # 0: chosen by attention() from the module settings
    block_kv: int = 0


def _blocks(n: int, size: int) -> Iterator[Tuple[int, int]]:
    for start in range(0, n, size):
        yield start, min(start + size, n)


def _cut(t: torch.Tensor, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor:
    """The [.., q0:q1, k0:k1] block of a mask/pse that may broadcast (size 1) on the rows."""
    rows = t if t.shape[-2] == 1 else t[..., q0:q1, :]
    return rows[..., k0:k1]


def _keep_mask(p: Problem, qi: int, ki: int, shape) -> torch.Tensor:
    """Dropout keep-mask of one block, scaled by 1/keep_prob; reproducible from (seed, block)."""
    gen = torch.Generator().manual_seed((p.seed * 1_000_003 + qi * 65_537 + ki) % (1 << 62))
    keep = torch.rand(shape, generator=gen) < p.keep_prob
    return keep.to(torch.float32).div_(p.keep_prob)


def _scores(p: Problem, qb, k, q0, q1, k0, k1, shape5, buf) -> Optional[torch.Tensor]:
    """Scaled, biased, masked float32 logits of one block, written into ``buf`` (reused so that no
    block pays for a fresh allocation); None when the band masks the whole block."""
    if p.band is not None and p.band.masks_all(q0, q1, k0, k1):
        return None
    flat = qb.shape[:3] + (k1 - k0,)
    s = torch.matmul(qb, k[:, :, k0:k1].transpose(-1, -2), out=buf[: math.prod(flat)].view(flat)).view(shape5)
    if p.pse is not None:
        s.add_(_cut(p.pse, q0, q1, k0, k1), alpha=p.scale if p.pse_scaled else 1.0)
    if p.mask is not None:
        s.masked_fill_(_cut(p.mask, q0, q1, k0, k1), MASKED)
    if p.band is not None:
        band = p.band.block(q0, q1, k0, k1, s.device)
        if band is not None:
            s.masked_fill_(band, MASKED)
    return s


def _choose_blocks(p: Problem, b: int, nq: int, sq: int, skv: int) -> None:
    """Key blocks of BLOCK_KV and query blocks as tall as SCORE_BLOCK_ELEMENTS allows; under a
    band (causal, sliding window) square blocks of a quarter of that instead (256 x 256 for 8
    heads), so that more of them lie wholly outside the band and are skipped."""
    per_row = SCORE_BLOCK_ELEMENTS // (b * nq)
    square = 1 << max(0, (math.isqrt(per_row) // 2).bit_length() - 1)  # a power of 2, square/4 fits
    if not p.block_kv:
        p.block_kv = max(1, min(skv, BLOCK_KV, per_row, square if p.band is not None else per_row))
    if not p.block_q:
        rows = square if p.band is not None else per_row // p.block_kv
        p.block_q = BLOCK_Q or max(1, min(sq, rows, per_row // p.block_kv))


def _forward(q, k, v, p: Problem):
    """q [B,Nkv,G,Sq,D] float32 already scaled; k/v [B,Nkv,Skv,*] float32 -> out (f32), max, sum.

    Per key/value block: the row max, ``exp(s - running max)`` in place, its row sum, and one
    matmul with V merge the block into the running result (the FlashAttention-2 recurrence); five
    passes over a score block that stays cache-sized.
    """
    B, Nkv, G, Sq, D = q.shape
    Skv, Dv = k.shape[2], v.shape[-1]
    out = q.new_empty(B, Nkv, G, Sq, Dv)
    row_max = q.new_empty(B, Nkv, G, Sq)
    row_sum = q.new_empty(B, Nkv, G, Sq)
    buf = q.new_empty(B * Nkv * G * min(Sq, p.block_q) * min(Skv, p.block_kv))
    for qi, (q0, q1) in enumerate(_blocks(Sq, p.block_q)):
        bq = q1 - q0
        rows = (B, Nkv, G * bq)
        qb = q[:, :, :, q0:q1].reshape(*rows, D)
        m = l = acc = None
        for ki, (k0, k1) in enumerate(_blocks(Skv, p.block_kv)):
            s = _scores(p, qb, k, q0, q1, k0, k1, (B, Nkv, G, bq, k1 - k0), buf)
            if s is None:
                continue
            m_blk = s.amax(-1, keepdim=True)
            m_new = m_blk if m is None else torch.maximum(m, m_blk)
            s.sub_(m_new).exp_()
            l_blk = s.sum(-1, keepdim=True)
            if p.keep_prob < 1:
                s.mul_(_keep_mask(p, qi, ki, s.shape))
            probs, values = s.view(B * Nkv, G * bq, k1 - k0), v[:, :, k0:k1].reshape(B * Nkv, k1 - k0, Dv)
            if m is None:
                l, acc = l_blk, torch.bmm(probs, values)
            else:
                alpha = (m - m_new).exp_()
                l = l.mul_(alpha).add_(l_blk)
                acc = acc.mul_(alpha.view(B * Nkv, G * bq, 1)).baddbmm_(probs, values)
            m = m_new
        if m is None:  # no key at all (Skv == 0) or every block outside the band
            m, l, acc = q.new_full((B, Nkv, G, bq, 1), MASKED), q.new_ones(B, Nkv, G, bq, 1), q.new_zeros(B * Nkv, G * bq, Dv)
        o = acc.view(B, Nkv, G, bq, Dv).div_(l)
        m, l = m[..., 0], l[..., 0]
        dead = m == MASKED
        if dead.any():
            mean_v = v.mean(2, keepdim=True).unsqueeze(2) if Skv else v.new_zeros(B, Nkv, 1, 1, Dv)
            fill = torch.zeros_like(mean_v) if p.zero_dead_rows else mean_v
            o = torch.where(dead.unsqueeze(-1), fill, o)
            l = torch.where(dead, float(Skv), l)
        out[:, :, :, q0:q1] = o
        row_max[..., q0:q1] = m
        row_sum[..., q0:q1] = l
    return out, row_max, row_sum


def _backward(q, k, v, out, dout, row_max, row_sum, p: Problem):
    """Gradients w.r.t. the scaled q (times scale = dq), k and v, recomputing blocks."""
    B, Nkv, G, Sq, D = q.shape
    Skv, Dv = k.shape[2], v.shape[-1]
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    lse = row_max + row_sum.log()
    live = (row_max != MASKED).to(torch.float32)
    delta = (dout * out).sum(-1)
    buf = q.new_empty(B * Nkv * G * min(Sq, p.block_q) * min(Skv, p.block_kv))
    for qi, (q0, q1) in enumerate(_blocks(Sq, p.block_q)):
        bq = q1 - q0
        qb = q[:, :, :, q0:q1].reshape(B, Nkv, G * bq, D)
        dob = dout[:, :, :, q0:q1].reshape(B, Nkv, G * bq, Dv)
        lse_b = lse[..., q0:q1].unsqueeze(-1)
        live_b = live[..., q0:q1].unsqueeze(-1)
        delta_b = delta[..., q0:q1].unsqueeze(-1)
        dqb = torch.zeros_like(qb)
        for ki, (k0, k1) in enumerate(_blocks(Skv, p.block_kv)):
            shape5 = (B, Nkv, G, bq, k1 - k0)
            s = _scores(p, qb, k, q0, q1, k0, k1, shape5, buf)
            if s is None:
                continue
            prob = s.sub_(lse_b).exp_().mul_(live_b)  # dead rows do not depend on q, k (see below)
            dprob = torch.matmul(dob, v[:, :, k0:k1].transpose(-1, -2)).view(shape5)
            dropped = prob
            if p.keep_prob < 1:
                keep = _keep_mask(p, qi, ki, shape5)
                dropped = prob * keep
                dprob.mul_(keep)
            flat = (B, Nkv, G * bq, k1 - k0)
            dv[:, :, k0:k1] += torch.matmul(dropped.view(flat).transpose(-1, -2), dob)
            ds = dprob.sub_(delta_b).mul_(prob).view(flat)
            dqb += torch.matmul(ds, k[:, :, k0:k1])
            dk[:, :, k0:k1] += torch.matmul(ds.transpose(-1, -2), qb)
        dq[:, :, :, q0:q1] = dqb.view(B, Nkv, G, bq, D)
    if not p.zero_dead_rows and Skv:
        # a dead row's output is mean(V): each key gets 1/Skv of that row's output gradient
        dead_dout = (dout * (1 - live).unsqueeze(-1)).sum((2, 3))
        dv += (dead_dout / Skv).unsqueeze(2)
    return dq, dk, dv


class _BlockedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, problem: Problem):
        B, Nq, Sq, D = q.shape
        Nkv = k.shape[1]
        qs = (q.float().contiguous() * problem.scale).view(B, Nkv, Nq // Nkv, Sq, D)
        kf, vf = k.float().contiguous(), v.float().contiguous()
        out, row_max, row_sum = _forward(qs, kf, vf, problem)
        row_max, row_sum = row_max.view(B, Nq, Sq), row_sum.view(B, Nq, Sq)
        out = out.view(B, Nq, Sq, vf.shape[-1])
        ctx.save_for_backward(q, k, v, out, row_max, row_sum)
        ctx.problem = problem
        ctx.mark_non_differentiable(row_max, row_sum)
        return out.to(q.dtype), row_max, row_sum

    @staticmethod
    def backward(ctx, dout, _dmax, _dsum):
        q, k, v, out, row_max, row_sum = ctx.saved_tensors
        return (*attention_backward(q, k, v, out, dout, row_max, row_sum, ctx.problem), None)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, problem: Problem):
    """Blocked attention of one dense BNSD problem.

    Returns ``(out [B,Nq,Sq,Dv] in q's dtype, row_max [B,Nq,Sq] f32, row_sum [B,Nq,Sq] f32)``;
    ``row_max``/``row_sum`` are the softmax statistics (``lse = row_max + log(row_sum)``).
    Differentiable in q, k and v (not in pse, as on the NPU, whose grad op returns no dpse).
    """
    B, Nq, Sq, _ = q.shape
    _choose_blocks(problem, B, Nq, Sq, k.shape[2])
    return _BlockedAttention.apply(q, k, v, problem)


def attention_backward(q, k, v, out, dout, row_max, row_sum, problem: Problem):
    """``(dq, dk, dv)`` of one dense BNSD problem, in the inputs' dtypes, from its output and its
    softmax statistics ([B, Nq, Sq]): the FlashAttention-2 backward, which recomputes each score
    block from the statistics (what npu_fusion_attention_grad takes them for)."""
    B, Nq, Sq, D = q.shape
    Nkv, Skv, Dv = k.shape[1], k.shape[2], v.shape[-1]
    _choose_blocks(problem, B, Nq, Sq, Skv)
    rows = (B, Nkv, Nq // Nkv, Sq)
    qs = (q.float().contiguous() * problem.scale).view(*rows, D)
    dq, dk, dv = _backward(qs, k.float().contiguous(), v.float().contiguous(), out.float().reshape(*rows, Dv),
                           dout.float().reshape(*rows, Dv), row_max.float().reshape(rows),
                           row_sum.float().reshape(rows), problem)
    return dq.mul_(problem.scale).view(B, Nq, Sq, D).to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def lse_of(row_max: torch.Tensor, row_sum: torch.Tensor) -> torch.Tensor:
    """log-sum-exp of the logits from the softmax statistics."""
    return row_max + row_sum.log()


def dropout_seed() -> int:
    """A dropout seed drawn from torch's default generator, so torch.manual_seed makes it repeat."""
    return int(torch.randint(0, 1 << 31, (), dtype=torch.int64))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
