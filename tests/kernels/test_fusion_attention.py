"""``npu_fusion_attention`` against the independent float64 reference of ``attention_ref``.

The ``small_blocks`` fixture makes every case run through many query and key/value blocks with
ragged edges (the online-softmax merging, band skipping, block-wise dropout and backward). The
``blocked_path`` fixture turns the SDPA fast path off, so that every case here tests the blocked
core; ``test_fusion_attention_sdpa`` tests the fast path and its agreement with the blocked one.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

import npu_migrate.kernels._attention_core as core
import npu_migrate.kernels._fusion_attention_sdpa as sdpa
from npu_migrate.kernels._checks import NpuOpError
from npu_migrate.kernels.fusion_attention import npu_fusion_attention
from tests.kernels.attention_ref import (  # noqa: F401 (small_blocks: an autouse fixture)
    INT_MAX, band, compressed, from_layout, reference, small_blocks, to_layout,
)
from tests.tolerances import tolerance

# float32 gradients go through four Skv- or Sq-long fp32 matmul chains (vs a float64 reference)
GRAD_TOL = dict(atol=1e-4, rtol=1e-4)
B, NQ, NKV, SQ, SKV, D = 2, 4, 2, 23, 37, 16


def qkv(dtype=torch.float32, b=B, nq=NQ, nkv=NKV, sq=SQ, skv=SKV, d=D, dv=None, grad=False):
    gen = torch.Generator().manual_seed(0)
    make = lambda *shape: torch.randn(*shape, generator=gen).to(dtype).requires_grad_(grad)  # noqa: E731
    return make(b, nq, sq, d), make(b, nkv, skv, d), make(b, nkv, skv, dv or d)


def close(out, ref, dtype=torch.float32):
    torch.testing.assert_close(out.double(), ref, **tolerance("npu_fusion_attention", dtype))


SCALE = 1 / math.sqrt(D)


@pytest.fixture(autouse=True)
def blocked_path(monkeypatch):
    monkeypatch.setattr(sdpa, "ENABLED", False)


# ----------------------------------------------------------------------------- forward

@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
def test_layouts_gqa_cross_lengths(layout):
    q, k, v = qkv()
    mask = torch.rand(B, 1, SQ, SKV, generator=torch.Generator().manual_seed(1)) < 0.3
    out = npu_fusion_attention(to_layout(q, layout), to_layout(k, layout), to_layout(v, layout), NQ, layout,
                               atten_mask=mask, scale=SCALE)[0]
    assert out.shape == to_layout(q, layout).shape
    close(from_layout(out, layout, NQ), reference(q, k, v, scale=SCALE, mask=mask))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dtypes(dtype):
    q, k, v = qkv(dtype)
    mask = band(SQ, SKV, INT_MAX, 0)
    out = npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=mask, scale=SCALE)[0]
    assert out.dtype == dtype
    close(out, reference(q, k, v, scale=SCALE, mask=mask), dtype)


@pytest.mark.parametrize("shape", ["BNSS", "B1SS", "11SS", "SS"])
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.uint8])
def test_mask_shapes_and_dtypes(shape, mask_dtype):
    q, k, v = qkv()
    dims = {"BNSS": (B, NQ), "B1SS": (B, 1), "11SS": (1, 1), "SS": ()}[shape]
    mask = (torch.rand(*dims, SQ, SKV, generator=torch.Generator().manual_seed(2)) < 0.4).to(mask_dtype)
    out = npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=mask, scale=SCALE)[0]
    close(out, reference(q, k, v, scale=SCALE, mask=mask.bool()))


def test_mask_true_means_masked_out():
    q, k, v = qkv(sq=4, skv=4)
    keep_only_first = torch.ones(4, 4, dtype=torch.bool)
    keep_only_first[:, 0] = False
    out = npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=keep_only_first)[0]
    close(out, v.repeat_interleave(2, 1)[:, :, :1].expand(-1, -1, 4, -1).double())


@pytest.mark.parametrize("sq,skv", [(SQ, SKV), (SKV, SQ), (SQ, SQ)])
@pytest.mark.parametrize("mode", [0, 1, 2, 3, 4])
def test_sparse_modes(mode, sq, skv):
    q, k, v = qkv(sq=sq, skv=skv)
    pre, nxt = 5, 3
    given = torch.rand(sq, skv, generator=torch.Generator().manual_seed(3)) < 0.2
    atten_mask = given if mode in (0, 1) else compressed()
    expected = {
        0: given | band(sq, skv, pre, nxt),         # mask + band anchored top-left
        1: given,                                   # pre/next ignored
        2: band(sq, skv, INT_MAX, 0),               # leftUpCausal
        3: band(sq, skv, INT_MAX, 0, True),         # rightDownCausal
        4: band(sq, skv, pre, nxt, True),           # band anchored bottom-right
    }[mode]
    out = npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=atten_mask, scale=SCALE, sparse_mode=mode,
                               pre_tockens=pre, next_tockens=nxt)[0]
    # rightDownCausal applies the kernel's invalid-row correction by itself (Sq > Skv leaves rows without keys)
    close(out, reference(q, k, v, scale=SCALE, mask=expected, dead_rows="zero" if mode == 3 else "mean"))


def test_right_down_causal_differs_from_left_up_when_sq_lt_skv():
    q, k, v = qkv()
    left = npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=compressed(), sparse_mode=2)[0]
    right = npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=compressed(), sparse_mode=3)[0]
    assert not torch.allclose(left, right)


@pytest.mark.parametrize("mode", [0, 2, 3, 4])
def test_no_mask_means_full_attention(mode):
    q, k, v = qkv()
    out = npu_fusion_attention(q, k, v, NQ, "BNSD", scale=SCALE, sparse_mode=mode, pre_tockens=1, next_tockens=0)[0]
    close(out, reference(q, k, v, scale=SCALE))


def test_scale_defaults_to_one():
    q, k, v = qkv()
    close(npu_fusion_attention(q, k, v, NQ, "BNSD")[0], reference(q, k, v, scale=1.0))


@pytest.mark.parametrize("shape", [(B, NQ, SQ, SKV), (B, NQ, 1, SKV), (1, NQ, SQ, SKV)])
def test_pse_is_added_before_the_scale(shape):
    q, k, v = qkv()
    pse = torch.randn(*shape, generator=torch.Generator().manual_seed(4))
    mask = band(SQ, SKV, INT_MAX, 0, True)
    out = npu_fusion_attention(q, k, v, NQ, "BNSD", pse=pse, atten_mask=compressed(), sparse_mode=3, scale=SCALE)[0]
    close(out, reference(q, k, v, scale=SCALE, mask=mask, pse=pse, pse_scaled=True))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_upstream_bsh_case(dtype):
    """torch_npu's BSH test: [1, 32, 128, 128] (BNSD) passed as BSH, head_num 32, scale 0.08838."""
    gen = torch.Generator().manual_seed(13)
    q, k, v = (torch.randn(1, 32, 128, 128, generator=gen).to(dtype) for _ in range(3))
    out = npu_fusion_attention(to_layout(q, "BSH"), to_layout(k, "BSH"), to_layout(v, "BSH"), 32, "BSH", scale=0.08838)[0]
    assert out.shape == (1, 128, 32 * 128) and out.dtype == dtype
    close(from_layout(out, "BSH", 32), reference(q, k, v, scale=0.08838), dtype)


def test_sparse_mode_three_zeroes_rows_without_keys_but_mode_zero_gives_mean():
    """Sq > Skv with rightDownCausal: the first Sq - Skv rows see no key. The kernel's invalid-row
    handling (auto-enabled for sparse_mode 3) gives 0 there; a full mask with a masked row under
    sparse_mode 0 keeps the large-negative fill's mean of V unless inner_precise=2."""
    q, k, v = qkv(sq=SKV, skv=SQ)
    out = npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=compressed(), sparse_mode=3, scale=SCALE)[0]
    assert out[:, :, :SKV - SQ].abs().max() == 0 and out[:, :, SKV - SQ:].abs().min() > 0
    explicit = band(SKV, SQ, INT_MAX, 0, True)
    mode0 = npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=explicit, scale=SCALE)[0]
    close(mode0, reference(q, k, v, scale=SCALE, mask=explicit, dead_rows="mean"))
    close(out, reference(q, k, v, scale=SCALE, mask=explicit, dead_rows="zero"))


def test_inner_precise_two_zeroes_fully_masked_rows():
    q, k, v = qkv()
    mask = torch.zeros(SQ, SKV, dtype=torch.bool)
    mask[3] = True
    mask[SQ - 1] = True
    out0 = npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=mask, scale=SCALE)[0]
    out2 = npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=mask, scale=SCALE, inner_precise=2)[0]
    assert not out0.isnan().any() and not out2.isnan().any()
    close(out0, reference(q, k, v, scale=SCALE, mask=mask, dead_rows="mean"))
    close(out2, reference(q, k, v, scale=SCALE, mask=mask, dead_rows="zero"))
    assert out2[:, :, 3].abs().max() == 0


def test_seven_tuple_shapes_dtypes_and_softmax_statistics():
    q, k, v = qkv(torch.float16, dv=8)
    res = npu_fusion_attention(to_layout(q, "BSH"), to_layout(k, "BSH"), to_layout(v, "BSH"), NQ, "BSH",
                               scale=SCALE)
    assert len(res) == 7
    out, smax, ssum, sout, seed, offset, numels = res
    assert out.shape == (B, SQ, NQ * 8) and out.dtype == torch.float16
    assert smax.shape == ssum.shape == (B, NQ, SQ, 8)
    assert smax.dtype == ssum.dtype == torch.float32
    assert sout.shape == (0,)
    assert (seed, offset, numels) == (0, 0, 0)
    logits = SCALE * q.double() @ k.double().repeat_interleave(2, 1).transpose(-1, -2)
    rowmax = logits.amax(-1)
    # float32 vs float64: the max is one dot product (1e-5); the sum adds Skv float32 exps over blocks (1e-4)
    torch.testing.assert_close(smax.double(), rowmax.unsqueeze(-1).expand(-1, -1, -1, 8), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ssum.double(), (logits - rowmax.unsqueeze(-1)).exp().sum(-1, keepdim=True).expand(-1, -1, -1, 8),
                               atol=1e-4, rtol=1e-5)


# ----------------------------------------------------------------------------- dropout

def _dropout_keep(keep_prob, seed, sq=32, skv=16):
    """Reveal the keep-mask: with q = k = 0 every probability is 1/Skv, and V = I copies it out."""
    q = torch.zeros(B, NQ, sq, skv)
    v = torch.eye(skv).expand(B, NKV, skv, skv)
    torch.manual_seed(seed)
    out = npu_fusion_attention(q, torch.zeros(B, NKV, skv, skv), v, NQ, "BNSD", keep_prob=keep_prob)
    return out[0] * keep_prob * skv, out


def test_dropout_statistics_and_determinism():
    keep, res = _dropout_keep(0.7, seed=1)
    assert torch.allclose(keep, keep.round(), atol=1e-4)  # entries are 0 or 1
    assert abs(keep.mean().item() - 0.7) < 0.04
    again, _ = _dropout_keep(0.7, seed=1)
    other, _ = _dropout_keep(0.7, seed=2)
    assert torch.equal(keep, again) and not torch.equal(keep, other)
    assert res[6] == B * NQ * 32 * 16  # numels of the dropout mask


def test_dropout_forward_and_backward_match_reference_with_the_same_mask():
    keep_prob = 0.8
    keep, _ = _dropout_keep(keep_prob, seed=3)
    q, k, v = qkv(sq=32, skv=16, grad=True)
    torch.manual_seed(3)
    out = npu_fusion_attention(q, k, v, NQ, "BNSD", keep_prob=keep_prob, scale=SCALE)[0]
    ref = reference(q, k, v, scale=SCALE, keep=keep.double() / keep_prob)
    close(out, ref)
    _check_grads(out, ref, (q, k, v))


# ----------------------------------------------------------------------------- backward

def _check_grads(out, ref, inputs):
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(9))
    got = torch.autograd.grad(out, inputs, grad)
    want = torch.autograd.grad(ref, inputs, grad.double())
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w.double(), **GRAD_TOL)


@pytest.mark.parametrize("layout", ["BSH", "BNSD"])
def test_gradients_gqa_mask_band_pse(layout):
    q, k, v = qkv(grad=True)
    pse = torch.randn(1, NQ, SQ, SKV, generator=torch.Generator().manual_seed(7))
    given = torch.rand(B, 1, SQ, SKV, generator=torch.Generator().manual_seed(8)) < 0.2
    out = npu_fusion_attention(to_layout(q, layout), to_layout(k, layout), to_layout(v, layout), NQ, layout,
                               pse=pse, atten_mask=given, scale=SCALE, pre_tockens=6, next_tockens=2)[0]
    ref = reference(q, k, v, scale=SCALE, pse=pse, mask=given | band(SQ, SKV, 6, 2))
    _check_grads(from_layout(out, layout, NQ), ref, (q, k, v))


@pytest.mark.parametrize("inner_precise,dead_rows", [(0, "mean"), (2, "zero")])
def test_gradients_with_fully_masked_rows(inner_precise, dead_rows):
    q, k, v = qkv(sq=SKV, skv=SQ, grad=True)
    mask = band(SKV, SQ, INT_MAX, 0, True)  # rightDownCausal with Sq > Skv: rows 0..13 masked whole
    assert mask.all(-1).sum() == SKV - SQ
    out = npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=mask, scale=SCALE, inner_precise=inner_precise)[0]
    ref = reference(q, k, v, scale=SCALE, mask=mask, dead_rows=dead_rows)
    close(out, ref)
    _check_grads(out, ref, (q, k, v))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gradients_keep_the_input_dtype(dtype):
    q, k, v = qkv(dtype, grad=True)
    out = npu_fusion_attention(q, k, v, NQ, "BNSD", scale=SCALE)[0]
    out.float().sum().backward()
    assert q.grad.dtype == k.grad.dtype == v.grad.dtype == dtype


# ----------------------------------------------------------------------------- blocks and memory

def test_blocked_path_is_exercised(monkeypatch):
    seen = []
    real = core._scores

    def spy(p, qb, k, q0, q1, k0, k1, shape5, buf):
        s = real(p, qb, k, q0, q1, k0, k1, shape5, buf)
        if s is not None:  # None: a block the causal band masks whole, skipped
            seen.append((q1 - q0, k1 - k0))
        return s

    monkeypatch.setattr(core, "_scores", spy)
    q, k, v = qkv()
    close(npu_fusion_attention(q, k, v, NQ, "BNSD", scale=SCALE)[0], reference(q, k, v, scale=SCALE))
    assert len(seen) == math.ceil(SQ / 8) * math.ceil(SKV / 8)
    assert max(bq for bq, _ in seen) == 8 and max(bk for _, bk in seen) == 8
    seen.clear()
    npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=compressed(), sparse_mode=2)
    assert len(seen) < math.ceil(SQ / 8) * math.ceil(SKV / 8)  # causal skips the blocks above the band


def test_default_blocks_bound_the_score_memory(monkeypatch):
    monkeypatch.setattr(core, "BLOCK_KV", 2048)
    monkeypatch.setattr(core, "BLOCK_Q", 0)
    monkeypatch.setattr(core, "SCORE_BLOCK_ELEMENTS", 1 << 20)
    biggest = []
    real = core._scores
    monkeypatch.setattr(core, "_scores", lambda *a: biggest.append(a[-2]) or real(*a))
    s = 4096
    q = torch.randn(1, 2, s, 8)
    npu_fusion_attention(q, q, q, 2, "BNSD")
    assert max(math.prod(shape) for shape in biggest) <= 1 << 20 < 2 * s * s


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="peak RSS reset needs Linux /proc/self/clear_refs")
def test_peak_memory_is_linear_in_sequence_length(monkeypatch):
    monkeypatch.setattr(core, "BLOCK_KV", 1024)
    monkeypatch.setattr(core, "BLOCK_Q", 0)
    s, scores_mib = 6144, 6144 * 6144 * 4 / 2**20  # one S x S float32 matrix: 144 MiB
    q = torch.randn(1, 1, s, 16)
    npu_fusion_attention(q, q, q, 1, "BNSD", scale=0.25)  # warm-up
    status = lambda key: next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key))  # noqa: E731,E741
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status("VmRSS:")
    npu_fusion_attention(q, q, q, 1, "BNSD", scale=0.25)
    assert (status("VmHWM:") - before) / 1024 < scores_mib / 4


# ----------------------------------------------------------------------------- errors

def test_compressed_mask_changed_in_place_is_checked_again():
    q, k, v = qkv()
    mask = compressed()
    npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=mask, sparse_mode=2)
    npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=mask, sparse_mode=2)  # the cached check
    mask[0, 5] = False
    with pytest.raises(NpuOpError, match="must equal torch.triu"):
        npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=mask, sparse_mode=2)
    with torch.inference_mode():
        frozen = compressed()
    npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=frozen, sparse_mode=3)  # no version counter: checked each call


@pytest.mark.parametrize("change,match", [
    (dict(dtype=torch.float64), "float64"),
    (dict(query_dtype=torch.float16), "share one dtype"),
    (dict(mask=torch.zeros(SQ, SKV)), "additive float mask"),
    (dict(mask=torch.zeros(SQ, SKV, dtype=torch.int32)), "bool/uint8"),
    (dict(mask=torch.zeros(1, SQ, SKV, dtype=torch.bool)), "atten_mask shape"),
    (dict(mask=torch.zeros(SKV, SQ, dtype=torch.bool)), "atten_mask shape"),
    (dict(mask=torch.zeros(SQ, SKV, dtype=torch.bool), sparse_mode=3), "compressed 2048x2048"),
    (dict(mask=torch.ones(2048, 2048, dtype=torch.bool), sparse_mode=2), "must equal torch.triu"),
    (dict(sparse_mode=6), "not emulated"),
    (dict(sparse_mode=9), "sparse_mode must be 0-8"),
    (dict(nkv=3), "multiple of the key/value heads"),
    (dict(d=769), r"D must be in \[1, 768\]"),
    (dict(dv=32), "must not exceed"),
    (dict(head_num=3), "query has 4 heads but head_num=3"),
    (dict(head_num=300), r"head_num must be in \[1, 256\]"),
    (dict(keep_prob=0.0), r"keep_prob must be in \(0, 1\]"),
    (dict(layout="BSH"), "must be 3-D"),
    (dict(layout="XYZ"), "input_layout must be one of"),
    (dict(inner_precise=3), "inner_precise"),
    (dict(padding_mask=torch.zeros(1)), "padding_mask is not supported"),
    (dict(actual_seq_qlen=[SQ]), "only used with input_layout=TND"),
])
def test_errors(change, match):
    nkv, d, dv = change.get("nkv", NKV), change.get("d", D), change.get("dv")
    dtype = change.get("dtype", torch.float32)
    q, k, v = qkv(dtype, nkv=nkv, d=d, dv=dv, nq=4)
    q = q.to(change.get("query_dtype", dtype))
    kwargs = {key: change[key] for key in ("sparse_mode", "keep_prob", "inner_precise", "padding_mask", "actual_seq_qlen")
              if key in change}
    with pytest.raises(NpuOpError, match=match):
        npu_fusion_attention(q, k, v, change.get("head_num", NQ), change.get("layout", "BNSD"),
                             atten_mask=change.get("mask"), **kwargs)
