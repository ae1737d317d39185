"""The independent float64 attention reference shared by the fusion and inference attention tests.

Plain matmul-softmax-matmul on BNSD tensors with explicit masks built from the documented
formulas (``triu``/``tril``), never the emulator's core. The ``small_blocks`` fixture (import it
into a test module to use it) shrinks the core's blocks so that every case runs through many query
and key/value blocks with ragged edges.
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_migrate.kernels._attention_core as core

INT_MAX = 2147483647


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(core, "BLOCK_KV", 8)
    monkeypatch.setattr(core, "BLOCK_Q", 8)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: thread hand-offs would cost more than the work
    yield
    torch.set_num_threads(threads)


def reference(q, k, v, *, scale, mask=None, pse=None, pse_scaled=True, dead_rows="mean", keep=None):
    """softmax(logits) @ v in float64 (BNSD, GQA by repeating K/V); mask True = masked out.

    A row with every key masked yields the mean of V ("mean", the large-negative-fill behaviour)
    or 0 ("zero", inner_precise=2). ``keep``: dropout keep-mask already divided by keep_prob.
    """
    q, k, v = q.double(), k.double(), v.double()
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2)
    if pse is None:
        s = scale * s
    elif pse_scaled:
        s = scale * (s + pse.double())
    else:
        s = scale * s + pse.double()
    dead = None
    if mask is not None:
        mask = mask.bool().expand(s.shape)
        dead = mask.all(-1, keepdim=True)
        s = s.masked_fill(mask, -math.inf).masked_fill(dead, 0.0)
    p = torch.softmax(s, -1)
    if dead is not None and dead_rows == "zero":
        p = p.masked_fill(dead, 0.0)
    if keep is not None:
        p = p * keep
    return p @ v


def softmax_stats(q, k, *, scale, mask=None):
    """The row max and row sum the kernel returns (torch_npu's TND test golden: ``x_max = max(qk *
    scale, -1)``, ``x_sum = sum(exp(qk * scale - x_max), -1)``), over the keys a row attends; float64
    [B, Nq, Sq]."""
    g = q.shape[1] // k.shape[1]
    s = scale * (q.double() @ k.double().repeat_interleave(g, 1).transpose(-1, -2))
    if mask is not None:
        s = s.masked_fill(mask.bool().expand(s.shape), -math.inf)
    row_max = s.amax(-1, keepdim=True)
    return row_max[..., 0], (s - row_max).exp().sum(-1)


def tnd(xs):
    """Per-sequence BNSD tensors [1, N, S_i, D] packed as one TND tensor [sum S_i, N, D]."""
    return torch.cat([x[0].transpose(0, 1) for x in xs])


def cumulative(lengths):
    """Per-batch lengths as the kernel's ``actual_seq_qlen``: cumulative, no leading 0."""
    return [int(c) for c in torch.tensor(lengths).cumsum(0)]


def band(sq, skv, pre, nxt, bottom_right=False):
    """The doc's band: masked = triu(ones, n+1) + tril(ones, -p-1), shifted by Skv-Sq if anchored bottom-right."""
    shift = skv - sq if bottom_right else 0
    ones = torch.ones(sq, skv, dtype=torch.bool)
    return torch.triu(ones, shift + nxt + 1) | torch.tril(ones, shift - pre - 1)


def compressed():
    return torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)


def to_layout(x, layout):
    """BNSD -> layout, written independently of the emulator."""
    b, n, s, d = x.shape
    return {
        "BNSD": lambda: x,
        "BSND": lambda: x.permute(0, 2, 1, 3).contiguous(),
        "BSH": lambda: x.permute(0, 2, 1, 3).reshape(b, s, n * d),
        "SBH": lambda: x.permute(2, 0, 1, 3).reshape(s, b, n * d),
    }[layout]()


def from_layout(y, layout, n):
    if layout == "BNSD":
        return y
    if layout == "BSND":
        return y.permute(0, 2, 1, 3)
    if layout == "BSH":
        b, s, h = y.shape
        return y.reshape(b, s, n, h // n).permute(0, 2, 1, 3)
    s, b, h = y.shape  # SBH
    return y.reshape(s, b, n, h // n).permute(1, 2, 0, 3)
