"""``npu_fusion_attention`` with ``input_layout="TND"`` (varlen) against the float64 reference.

Per-sequence golden outputs and statistics, zero-length batches anywhere in the batch, trailing
zeros in the cumulative lists, the softmax_layout of the statistics, torch_npu's own TND case.
"""

from __future__ import annotations

import math

import pytest
import torch

from npu_migrate.kernels._checks import NpuOpError
from npu_migrate.kernels.fusion_attention import npu_fusion_attention
from tests.kernels.attention_ref import (  # noqa: F401 (small_blocks: an autouse fixture)
    INT_MAX, band, compressed, cumulative, reference, small_blocks, softmax_stats, tnd,
)
from tests.kernels.test_fusion_attention import D, NKV, NQ, SCALE, _check_grads, close
from tests.tolerances import tolerance


def varlen(q_lens, kv_lens, seed=5, dtype=torch.float32, nq=NQ, nkv=NKV, d=D):
    """Per-sequence BNSD q/k/v lists for the given lengths."""
    gen = torch.Generator().manual_seed(seed)
    make = lambda n, heads: torch.randn(1, heads, n, d, generator=gen).to(dtype)  # noqa: E731
    return [make(n, nq) for n in q_lens], [make(n, nkv) for n in kv_lens], [make(n, nkv) for n in kv_lens]


def varlen_reference(qs, ks, vs, mode):
    """Each sequence on its own: causal modes anchored per sequence, rows without keys 0."""
    refs = []
    for qq, kk, vv in zip(qs, ks, vs):
        sq, skv = qq.shape[2], kk.shape[2]
        if sq and not skv:
            refs.append(torch.zeros(1, qq.shape[1], sq, vv.shape[3], dtype=torch.float64))
        elif sq:
            mask = {0: None, 2: band(sq, skv, INT_MAX, 0), 3: band(sq, skv, INT_MAX, 0, True)}[mode]
            refs.append(reference(qq, kk, vv, scale=SCALE, mask=mask, dead_rows="zero"))
    return tnd(refs)


@pytest.mark.parametrize("mode", [0, 2, 3])
@pytest.mark.parametrize("q_lens, kv_lens", [
    ([5, 0, 17, 9], [7, 0, 20, 3]),     # a zero-length batch in the middle
    ([0, 6, 11], [0, 9, 4]),             # ... first
    ([6, 11, 0, 0], [9, 4, 0, 0]),       # ... last (cumulative [6, 17, 17, 17])
    ([6, 3], [9, 0]),                    # queries without keys: 0
])
def test_varlen_tnd_zero_length_batches(mode, q_lens, kv_lens):
    qs, ks, vs = varlen(q_lens, kv_lens)
    kwargs = {} if mode == 0 else dict(atten_mask=compressed(), sparse_mode=mode)
    out, smax, ssum, sout, *_ = npu_fusion_attention(
        tnd(qs), tnd(ks), tnd(vs), NQ, "TND", scale=SCALE, actual_seq_qlen=cumulative(q_lens),
        actual_seq_kvlen=cumulative(kv_lens), **kwargs)
    close(out, varlen_reference(qs, ks, vs, mode))
    assert smax.shape == ssum.shape == (NQ, sum(q_lens), 8) and smax.dtype == torch.float32


def test_varlen_trailing_zeros_skip_batches():
    """``[6, 17, 0, 0]``: the two trailing entries are batches that are skipped (facts §2.1)."""
    qs, ks, vs = varlen([6, 11], [9, 4])
    args = (tnd(qs), tnd(ks), tnd(vs), NQ, "TND")
    dense = npu_fusion_attention(*args, scale=SCALE, actual_seq_qlen=[6, 17], actual_seq_kvlen=[9, 13])
    padded = npu_fusion_attention(*args, scale=SCALE, actual_seq_qlen=[6, 17, 0, 0], actual_seq_kvlen=[9, 13, 0, 0])
    for a, b in zip(dense[:3], padded[:3]):
        assert torch.equal(a, b)
    close(padded[0], varlen_reference(qs, ks, vs, 0))


def test_upstream_tnd_case_with_tnd_softmax_layout():
    """torch_npu's TND test: B=3, N1=8, N2=2, D=128, q lengths [1, 2, 3], kv lengths [3, 4, 5],
    float16, scale 1/sqrt(D), softmax_layout="TND"; output, softmax_max/sum [T, N1, 8] and the
    gradients against a float32 golden."""
    q_lens, kv_lens, d = [1, 2, 3], [3, 4, 5], 128
    qs, ks, vs = varlen(q_lens, kv_lens, seed=11, dtype=torch.float16, nq=8, nkv=2, d=d)
    q, k, v = (tnd(xs).requires_grad_() for xs in (qs, ks, vs))
    scale = 1 / math.sqrt(d)
    out, smax, ssum, sout, *_ = npu_fusion_attention(q, k, v, 8, "TND", scale=scale, actual_seq_qlen=cumulative(q_lens),
                                                     actual_seq_kvlen=cumulative(kv_lens), softmax_layout="TND")
    assert out.shape == (6, 8, d) and out.dtype == torch.float16 and sout.shape == (0,)
    assert smax.shape == ssum.shape == (6, 8, 8)
    ref_out, ref_max, ref_sum = [], [], []
    for qq, kk, vv in zip(qs, ks, vs):
        ref_out.append(reference(qq, kk, vv, scale=scale))
        row_max, row_sum = softmax_stats(qq, kk, scale=scale)
        ref_max.append(row_max[0].transpose(0, 1))
        ref_sum.append(row_sum[0].transpose(0, 1))
    close(out, tnd(ref_out), torch.float16)
    # float32 statistics of float16 inputs: one float32 dot product (max) and a few float32 exps (sum)
    torch.testing.assert_close(smax.double(), torch.cat(ref_max).unsqueeze(-1).expand(-1, -1, 8), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ssum.double(), torch.cat(ref_sum).unsqueeze(-1).expand(-1, -1, 8), atol=1e-5, rtol=1e-5)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(12)).half()
    got = torch.autograd.grad(out, (q, k, v), grad)
    leaves = [[t.double().requires_grad_() for t in xs] for xs in (qs, ks, vs)]
    ref = tnd([reference(qq, kk, vv, scale=scale) for qq, kk, vv in zip(*leaves)])
    want = torch.autograd.grad(ref, [t for xs in leaves for t in xs], grad.double())
    n = len(q_lens)
    for g, w in zip(got, (tnd(want[:n]), tnd(want[n:2 * n]), tnd(want[2 * n:]))):
        torch.testing.assert_close(g.double(), w, **tolerance("npu_fusion_attention", torch.float16))


def test_tnd_softmax_statistics_default_to_ntd():
    qs, ks, vs = varlen([4, 7], [5, 9])
    args = (tnd(qs), tnd(ks), tnd(vs), NQ, "TND")
    kwargs = dict(scale=SCALE, actual_seq_qlen=[4, 11], actual_seq_kvlen=[5, 14])
    ntd = npu_fusion_attention(*args, **kwargs)
    tnd_layout = npu_fusion_attention(*args, **kwargs, softmax_layout="TND")
    assert ntd[1].shape == (NQ, 11, 8) and tnd_layout[1].shape == (11, NQ, 8)
    assert torch.equal(ntd[1], tnd_layout[1].transpose(0, 1)) and torch.equal(ntd[2], tnd_layout[2].transpose(0, 1))
    assert torch.equal(ntd[0], tnd_layout[0])


def test_varlen_tnd_mask_is_applied_top_left_per_sequence():
    q_lens, kv_lens = [6, 11], [9, 4]
    gen = torch.Generator().manual_seed(6)
    qs = [torch.randn(1, NQ, n, D, generator=gen) for n in q_lens]
    ks = [torch.randn(1, NKV, n, D, generator=gen) for n in kv_lens]
    vs = [torch.randn(1, NKV, n, D, generator=gen) for n in kv_lens]
    mask = torch.rand(11, 9, generator=gen) < 0.3
    mask[:, 0] = False  # varlen masks may not mask a whole row
    out = npu_fusion_attention(tnd(qs), tnd(ks), tnd(vs), NQ, "TND", atten_mask=mask, scale=SCALE,
                               actual_seq_qlen=[6, 17], actual_seq_kvlen=[9, 13])[0]
    refs = [reference(qq, kk, vv, scale=SCALE, mask=mask[:qq.shape[2], :kk.shape[2]]) for qq, kk, vv in zip(qs, ks, vs)]
    close(out, tnd(refs))


def test_gradients_varlen_tnd():
    gen = torch.Generator().manual_seed(10)
    q = torch.randn(20, NQ, D, generator=gen, requires_grad=True)
    k = torch.randn(25, NKV, D, generator=gen, requires_grad=True)
    v = torch.randn(25, NKV, D, generator=gen, requires_grad=True)
    out = npu_fusion_attention(q, k, v, NQ, "TND", atten_mask=compressed(), sparse_mode=2, scale=SCALE,
                               actual_seq_qlen=[12, 20], actual_seq_kvlen=[10, 25])[0]
    bnsd = lambda t, a, b: t[a:b].transpose(0, 1).unsqueeze(0)  # noqa: E731
    refs = [reference(bnsd(q, qa, qb), bnsd(k, ka, kb), bnsd(v, ka, kb), scale=SCALE,
                      mask=band(qb - qa, kb - ka, INT_MAX, 0))[0].transpose(0, 1)
            for (qa, qb), (ka, kb) in [((0, 12), (0, 10)), ((12, 20), (10, 25))]]
    _check_grads(out, torch.cat(refs), (q, k, v))


def test_tnd_errors():
    q = torch.randn(10, NQ, D)
    with pytest.raises(NpuOpError, match="needs actual_seq_qlen"):
        npu_fusion_attention(q, q[:, :2], q[:, :2], NQ, "TND")
    with pytest.raises(NpuOpError, match="must end at the token count 10"):
        npu_fusion_attention(q, q[:, :2], q[:, :2], NQ, "TND", actual_seq_qlen=[0, 4, 8], actual_seq_kvlen=[4, 8, 10])
    with pytest.raises(NpuOpError, match="cumulative"):
        npu_fusion_attention(q, q[:, :2], q[:, :2], NQ, "TND", actual_seq_qlen=[6, 4, 10], actual_seq_kvlen=[4, 8, 10])
    with pytest.raises(NpuOpError, match="TND takes only"):
        npu_fusion_attention(q, q[:, :2], q[:, :2], NQ, "TND", actual_seq_qlen=[4, 10], actual_seq_kvlen=[4, 10],
                             atten_mask=torch.zeros(1, 1, 6, 6, dtype=torch.bool))
