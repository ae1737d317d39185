"""The SDPA fast path of ``npu_fusion_attention`` (``kernels._fusion_attention_sdpa``): taken exactly
where the call's semantics are SDPA's, and then agreeing with the blocked path and with the float64
reference of ``attention_ref``; its log-sum-exp statistics feed the backward exactly."""

from __future__ import annotations

import os

import pytest
import torch

import npu_migrate.kernels._fusion_attention_sdpa as sdpa
from npu_migrate.kernels import dispatcher
from npu_migrate.kernels.fusion_attention import npu_fusion_attention
from tests.kernels.attention_ref import (
    INT_MAX, band, compressed, cumulative, from_layout, reference, softmax_stats, tnd, to_layout,
)
from tests.kernels.test_fusion_attention import GRAD_TOL, NKV, NQ, SCALE, SKV, SQ, close, qkv
from tests.tolerances import tolerance


@pytest.fixture
def taken(monkeypatch):
    """How many calls went through the fast path."""
    calls = []
    real = sdpa.attention
    monkeypatch.setattr(sdpa, "attention", lambda call, how: calls.append(how) or real(call, how))
    return calls


def blocked(monkeypatch, *args, **kwargs):
    """The same call on the blocked path."""
    with monkeypatch.context() as m:
        m.setattr(sdpa, "ENABLED", False)
        return npu_fusion_attention(*args, **kwargs)


def lse(res):
    """The log-sum-exp the statistics stand for (both forms: max + log(sum))."""
    return res[1][..., 0].double() + res[2][..., 0].double().log()


def random_mask(*shape, p=0.3, seed=1):
    mask = torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) < p
    mask[..., 0] = False  # every row keeps a key: a row masked whole keeps the blocked path
    return mask


# (Sq, Skv, atten_mask, sparse_mode, the masked-out positions the reference applies; "given": atten_mask)
MAPPED = {
    "full": (SQ, SKV, None, 0, None),
    "no_mask_ignores_mode": (SQ, SKV, None, 4, None),
    "left_up_causal_sq_lt_skv": (SQ, SKV, "compressed", 2, band(SQ, SKV, INT_MAX, 0)),
    "left_up_causal_sq_gt_skv": (SKV, SQ, "compressed", 2, band(SKV, SQ, INT_MAX, 0)),
    "right_down_causal_square": (SQ, SQ, "compressed", 3, band(SQ, SQ, INT_MAX, 0, True)),
    "right_down_causal_sq_lt_skv": (SQ, SKV, "compressed", 3, band(SQ, SKV, INT_MAX, 0, True)),
    "right_down_causal_one_row": (1, SKV, "compressed", 3, None),
    "bool_mask_mode0": (SQ, SKV, "B1SS", 0, "given"),
    "bool_mask_mode1": (SQ, SKV, "BNSS", 1, "given"),
    "uint8_mask": (SQ, SKV, "SS-uint8", 0, "given"),
}


def _mask(kind, sq, skv):
    if kind is None:
        return None
    if kind == "compressed":
        return compressed()
    dims = {"B1SS": (2, 1), "BNSS": (2, NQ), "SS-uint8": ()}[kind]
    mask = random_mask(*dims, sq, skv)
    return mask.to(torch.uint8) if kind == "SS-uint8" else mask


@pytest.mark.slow
@pytest.mark.parametrize("case", list(MAPPED))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_mapped_calls_take_the_fast_path_and_agree(case, dtype, taken, monkeypatch):
    sq, skv, kind, mode, ref_kind = MAPPED[case]
    q, k, v = qkv(dtype, sq=sq, skv=skv)
    atten_mask = _mask(kind, sq, skv)
    ref_mask = atten_mask.bool() if isinstance(ref_kind, str) else ref_kind
    kwargs = dict(atten_mask=atten_mask, scale=SCALE, sparse_mode=mode)
    fast = npu_fusion_attention(q, k, v, NQ, "BNSD", **kwargs)
    assert len(taken) == 1
    slow = blocked(monkeypatch, q, k, v, NQ, "BNSD", **kwargs)
    assert fast[0].dtype == dtype and fast[1].shape == slow[1].shape == (2, NQ, sq, 8)
    close(fast[0], reference(q, k, v, scale=SCALE, mask=ref_mask), dtype)
    close(fast[0], slow[0].double(), dtype)
    row_max, row_sum = softmax_stats(q, k, scale=SCALE, mask=ref_mask)
    # float32 statistics of inputs in dtype: the fused kernel rounds intermediates to dtype, as the references do
    torch.testing.assert_close(lse(fast), row_max + row_sum.log(), **tolerance("npu_fusion_attention", dtype))
    torch.testing.assert_close(lse(slow), row_max + row_sum.log(), **tolerance("npu_fusion_attention", dtype))
    assert torch.equal(fast[2], torch.ones_like(fast[2]))  # log-sum-exp form: max = lse, sum = 1
    assert fast[3].shape == (0,) and fast[4:] == (0, 0, 0)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
def test_layouts_and_gqa(layout, taken, monkeypatch):
    q, k, v = qkv()
    args = (to_layout(q, layout), to_layout(k, layout), to_layout(v, layout), NQ, layout)
    fast = npu_fusion_attention(*args, atten_mask=compressed(), sparse_mode=2, scale=SCALE)[0]
    assert len(taken) == 1 and taken[0].is_causal and k.shape[1] == NKV < NQ
    assert fast.shape == args[0].shape
    close(from_layout(fast, layout, NQ), reference(q, k, v, scale=SCALE, mask=band(SQ, SKV, INT_MAX, 0)))
    torch.testing.assert_close(fast, blocked(monkeypatch, *args, atten_mask=compressed(), sparse_mode=2, scale=SCALE)[0],
                               **tolerance("npu_fusion_attention", torch.float32))


def _dead_row_mask():
    mask = random_mask(SQ, SKV)
    mask[5] = True
    return mask


# calls whose semantics SDPA does not have: (description, query/key/value change, kwargs)
NOT_MAPPED = {
    "pse": (dict(), dict(pse=torch.randn(1, NQ, SQ, SKV))),
    "band_mode4": (dict(), dict(atten_mask=compressed(), sparse_mode=4, pre_tockens=5, next_tockens=3)),
    "band_mode0": (dict(), dict(atten_mask=random_mask(SQ, SKV), sparse_mode=0, pre_tockens=5, next_tockens=3)),
    "right_down_causal_sq_gt_skv": (dict(sq=SKV, skv=SQ), dict(atten_mask=compressed(), sparse_mode=3)),
    "row_without_keys": (dict(), dict(atten_mask=_dead_row_mask())),
    "row_without_keys_inner_precise2": (dict(), dict(atten_mask=_dead_row_mask(), inner_precise=2)),
    "value_head_dim_smaller": (dict(dv=8), dict()),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(NOT_MAPPED))
def test_other_calls_keep_the_blocked_path(case, taken, monkeypatch):
    shape, kwargs = NOT_MAPPED[case]
    q, k, v = qkv(**shape)
    res = npu_fusion_attention(q, k, v, NQ, "BNSD", scale=SCALE, **kwargs)
    assert not taken
    torch.testing.assert_close(res[0], blocked(monkeypatch, q, k, v, NQ, "BNSD", scale=SCALE, **kwargs)[0], atol=0, rtol=0)
    # the blocked path's statistics: the true row max (a logit, at most lse) and a sum of at least 1
    assert (res[2] >= 1).all()


def test_dropout_keeps_the_blocked_path(taken):
    q, k, v = qkv()
    torch.manual_seed(0)
    assert npu_fusion_attention(q, k, v, NQ, "BNSD", keep_prob=0.9)[6] > 0
    assert not taken


def test_varlen_keeps_the_blocked_path(taken):
    q, k, v = qkv(b=1, sq=12, skv=12)
    qs, ks, vs = tnd([q[:, :, :5], q[:, :, 5:]]), tnd([k[:, :, :5], k[:, :, 5:]]), tnd([v[:, :, :5], v[:, :, 5:]])
    npu_fusion_attention(qs, ks, vs, NQ, "TND", actual_seq_qlen=cumulative([5, 7]), actual_seq_kvlen=cumulative([5, 7]))
    assert not taken


# ----------------------------------------------------------------------------- backward

def _grads(fn, q, k, v, dy):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = fn(q, k, v)
    return torch.autograd.grad(out, (q, k, v), dy)


@pytest.mark.slow
@pytest.mark.parametrize("sparse_mode", [0, 2])
def test_gradients_through_the_grad_op_from_log_sum_exp_statistics(sparse_mode, taken, monkeypatch):
    """torch.ops.npu.npu_fusion_attention saves the fast path's statistics for
    npu_fusion_attention_grad: the gradients equal the blocked path's and the reference's."""
    assert dispatcher.register()  # torch.ops.npu.*, without entering the emulation
    q, k, v = qkv()
    mask = compressed() if sparse_mode == 2 else None
    dy = torch.randn(2, NQ, SQ, v.shape[3], generator=torch.Generator().manual_seed(9))
    op = lambda q, k, v: torch.ops.npu.npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=mask,  # noqa: E731
                                                            sparse_mode=sparse_mode, scale=SCALE)[0]
    fast = _grads(op, q, k, v, dy)
    assert len(taken) == 1
    with monkeypatch.context() as m:
        m.setattr(sdpa, "ENABLED", False)
        slow = _grads(op, q, k, v, dy)
    ref_mask = band(SQ, SKV, INT_MAX, 0) if sparse_mode == 2 else None
    want = _grads(lambda q, k, v: reference(q, k, v, scale=SCALE, mask=ref_mask), q, k, v, dy.double())
    for f, s, w in zip(fast, slow, want):
        torch.testing.assert_close(f, s, **GRAD_TOL)
        torch.testing.assert_close(f, w, **GRAD_TOL)


def test_direct_call_is_differentiable(taken):
    q, k, v = qkv()
    mask = random_mask(2, 1, SQ, SKV)
    dy = torch.randn(2, NQ, SQ, v.shape[3], generator=torch.Generator().manual_seed(9))
    got = _grads(lambda q, k, v: npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=mask, scale=SCALE)[0], q, k, v, dy)
    assert len(taken) == 1
    want = _grads(lambda q, k, v: reference(q, k, v, scale=SCALE, mask=mask), q, k, v, dy.double())
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **GRAD_TOL)


# ----------------------------------------------------------------------------- memory

@pytest.mark.slow
@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="peak RSS reset needs Linux /proc/self/clear_refs")
@pytest.mark.parametrize("causal", [False, True])
def test_peak_memory_is_linear_in_sequence_length(causal, taken):
    s, scores_mib = 6144, 6144 * 6144 * 4 / 2**20  # one S x S float32 matrix: 144 MiB
    q = torch.randn(1, 1, s, 16)
    kwargs = dict(atten_mask=compressed(), sparse_mode=2 if causal else 3) if causal else {}
    npu_fusion_attention(q, q, q, 1, "BNSD", scale=0.25, **kwargs)  # warm-up
    status = lambda key: next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key))  # noqa: E731,E741
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status("VmRSS:")
    npu_fusion_attention(q, q, q, 1, "BNSD", scale=0.25, **kwargs)
    assert len(taken) == 2
    assert (status("VmHWM:") - before) / 1024 < scores_mib / 4
