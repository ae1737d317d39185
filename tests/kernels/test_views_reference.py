"""The emulated ops on views against independent float64 references (``attention_ref``, ``golden``),
and the view rules that need a scenario: the in-place rotary writing through the caller's tensors,
documented refusals on realistic views (a fused QKV projection's slices, a KV cache's prefix),
``npu_grouped_matmul``'s transposition rules, fused optimizers on non-contiguous parameters, and the
SDPA fast path's own precondition. ``test_views`` runs every op on every view kind against the
op on the contiguous copy.
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_migrate.kernels._fusion_attention_sdpa as sdpa
from npu_migrate import kernels
from npu_migrate.kernels._checks import NpuOpError
from npu_migrate.kernels._fusion_attention_args import prepare
from npu_migrate.kernels.optim import NpuFusedAdamW, NpuFusedSGD
from tests.kernels import golden, views
from tests.kernels.attention_ref import (  # noqa: F401 (small_blocks: an autouse fixture)
    band, compressed, cumulative, from_layout, reference, small_blocks, tnd, to_layout,
)
from tests.tolerances import tolerance

B, NQ, NKV, SQ, SKV, D = 2, 4, 2, 23, 37, 16
SCALE = 1 / math.sqrt(D)
VALUE_KINDS = [k for k in views.KINDS if not views.changes_values(k)]


@pytest.fixture(scope="module")
def torch_npu():
    with kernels.emulate():
        import torch_npu

        yield torch_npu


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def close(out, ref, dtype=torch.float32, *, op):
    torch.testing.assert_close(out.double(), ref, **tolerance(op, dtype))


# ----------------------------------------------------------------------------- npu_fusion_attention


@pytest.mark.parametrize("fast_path", [True, False], ids=["sdpa", "blocked"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fusion_attention_on_transposed_bnsd_views(torch_npu, monkeypatch, fast_path, dtype):
    """The issue's case: BNSD q/k/v that are ``x.transpose(-1, -2)`` views (the fast path returned
    values off by up to 1e36 here), with and without the compressed causal mask."""
    monkeypatch.setattr(sdpa, "ENABLED", fast_path)
    q, k, v = (randn(B, n, D, s, seed=i, dtype=dtype).transpose(-1, -2) for i, (n, s) in
               enumerate([(NQ, SQ), (NKV, SKV), (NKV, SKV)]))
    assert q.stride(-1) != 1
    out = torch_npu.npu_fusion_attention(q, k, v, NQ, "BNSD", scale=SCALE)[0]
    close(out, reference(q, k, v, scale=SCALE), dtype, op="npu_fusion_attention")
    causal = torch_npu.npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=compressed(), sparse_mode=3,
                                            scale=SCALE)[0]
    close(causal, reference(q, k, v, scale=SCALE, mask=band(SQ, SKV, 2**31 - 1, 0, True), dead_rows="zero"), dtype, op="npu_fusion_attention")


@pytest.mark.parametrize("kind", VALUE_KINDS)
@pytest.mark.parametrize("layout", ["BNSD", "BSND", "BSH", "SBH"])
@pytest.mark.parametrize("fast_path", [True, False], ids=["sdpa", "blocked"])
def test_fusion_attention_layouts_on_views(torch_npu, monkeypatch, fast_path, layout, kind):
    """q/k/v of every layout as views, with a B1SS mask and (blocked path) a pse, both views too."""
    monkeypatch.setattr(sdpa, "ENABLED", fast_path)
    q, k, v = randn(B, NQ, SQ, D), randn(B, NKV, SKV, D, seed=1), randn(B, NKV, SKV, D, seed=2)
    mask = randn(B, 1, SQ, SKV, seed=3) > 1.0
    pse = None if fast_path else randn(B, NQ, SQ, SKV, seed=4)
    args = [views.view(to_layout(t, layout), kind) for t in (q, k, v)]
    extra = dict(atten_mask=views.view(mask, kind))
    if pse is not None:
        extra["pse"] = views.view(pse, kind)
    out = torch_npu.npu_fusion_attention(*args, NQ, layout, scale=SCALE, **extra)[0]
    close(from_layout(out, layout, NQ), reference(q, k, v, scale=SCALE, mask=mask, pse=pse), op="npu_fusion_attention")


@pytest.mark.parametrize("kind", VALUE_KINDS)
def test_fusion_attention_varlen_on_views(torch_npu, kind):
    lengths_q, lengths_kv = [5, 9], [7, 11]
    qs = [randn(1, NQ, s, D, seed=i) for i, s in enumerate(lengths_q)]
    ks = [randn(1, NKV, s, D, seed=10 + i) for i, s in enumerate(lengths_kv)]
    vs = [randn(1, NKV, s, D, seed=20 + i) for i, s in enumerate(lengths_kv)]
    out = torch_npu.npu_fusion_attention(*(views.view(tnd(x), kind) for x in (qs, ks, vs)), NQ, "TND", scale=SCALE,
                                         actual_seq_qlen=cumulative(lengths_q),
                                         actual_seq_kvlen=cumulative(lengths_kv))[0]
    close(out, tnd([reference(q, k, v, scale=SCALE) for q, k, v in zip(qs, ks, vs)]), op="npu_fusion_attention")


@pytest.mark.parametrize("fast_path", [True, False], ids=["sdpa", "blocked"])
@pytest.mark.parametrize("kind", VALUE_KINDS)
def test_fusion_attention_gradients_on_views(torch_npu, monkeypatch, fast_path, kind):
    """dq, dk, dv reach the caller's views (leaves with their own strides) and match float64 autograd."""
    monkeypatch.setattr(sdpa, "ENABLED", fast_path)
    q, k, v = (views.view(randn(B, n, s, D, seed=i), kind).requires_grad_() for i, (n, s) in
               enumerate([(NQ, SQ), (NKV, SKV), (NKV, SKV)]))
    mask = band(SQ, SKV, 2**31 - 1, 0)
    w = randn(B, NQ, SQ, D, seed=5)
    out = torch_npu.npu_fusion_attention(q, k, v, NQ, "BNSD", atten_mask=mask, scale=SCALE)[0]
    got = torch.autograd.grad((out * w).sum(), (q, k, v))
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad((reference(*leaves, scale=SCALE, mask=mask) * w.double()).sum(), leaves)
    for g, r in zip(got, want):
        assert g.shape == r.shape
        torch.testing.assert_close(g.double(), r, atol=1e-4, rtol=1e-4)  # fp32 matmul chains vs float64


def test_sdpa_fast_path_takes_only_rows_of_unit_stride():
    """The fused kernel's precondition, checked by the plan itself (the op's own inputs always meet it)."""
    q = randn(B, NQ, D, SQ).transpose(-1, -2)
    k, v = randn(B, NKV, SKV, D, seed=1), randn(B, NKV, SKV, D, seed=2)
    args = (NQ, "BNSD", None, None, None, SCALE, 1.0, 2**31 - 1, 2**31 - 1, 0, None, None, 0, "", None, None)
    assert sdpa.plan(prepare(q, k, v, *args)) is None
    assert sdpa.plan(prepare(q.contiguous(), k, v, *args)) is not None


# ----------------------------------------------------------------------------- inference attention


@pytest.mark.parametrize("kind", VALUE_KINDS)
def test_incre_flash_attention_on_views(torch_npu, kind):
    """IFA documents no contiguity rule: a decode step on KV-cache views is the reference's."""
    half = torch.float16
    q = randn(B, NQ, 1, D, dtype=half)
    k, v = randn(B, NKV, SKV, D, seed=1, dtype=half), randn(B, NKV, SKV, D, seed=2, dtype=half)
    out = torch_npu.npu_incre_flash_attention(*(views.view(t, kind) for t in (q, k, v)), num_heads=NQ,
                                              num_key_value_heads=NKV, scale_value=SCALE, input_layout="BNSD")
    close(out, reference(q, k, v, scale=SCALE), half, op="npu_incre_flash_attention")


@pytest.mark.parametrize("op", ["npu_prompt_flash_attention", "npu_fused_infer_attention_score"])
def test_prompt_and_fused_infer_attention_take_contiguous_slices_and_refuse_strided_ones(torch_npu, op):
    """PFA/FIA: "不支持非连续的Tensor". A batch slice of a cache is contiguous (at a storage offset) and
    runs; the prefix of a cache preallocated for longer sequences is not, and is refused."""
    half = torch.float16
    cache_k, cache_v = randn(B + 2, NKV, 64, D, seed=1, dtype=half), randn(B + 2, NKV, 64, D, seed=2, dtype=half)
    q = randn(B, NQ, SQ, D, dtype=half)
    scale = dict(scale_value=SCALE) if op == "npu_prompt_flash_attention" else dict(scale=SCALE)
    common = dict(num_heads=NQ, num_key_value_heads=NKV, input_layout="BNSD", **scale)
    k, v = cache_k[1:1 + B], cache_v[1:1 + B]
    assert k.is_contiguous() and k.storage_offset() > 0
    out = getattr(torch_npu, op)(q, k, v, **common)
    out = out[0] if isinstance(out, tuple) else out
    close(out, reference(q, k, v, scale=SCALE), half, op=op)
    with pytest.raises(NpuOpError, match="key must be contiguous"):
        getattr(torch_npu, op)(q, cache_k[:B, :, :SKV], cache_v[:B, :, :SKV], **common)


# ----------------------------------------------------------------------------- rotary


@pytest.mark.parametrize("kind", VALUE_KINDS)
@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_rotary_mul_on_views(torch_npu, kind, mode):
    x = randn(2, 5, 3, 16)  # BSND
    angles = randn(1, 5, 1, 16, seed=1)
    cos, sin = angles.cos(), angles.sin()
    out = torch_npu.npu_rotary_mul(views.view(x, kind), views.view(cos, kind), views.view(sin, kind), mode)
    close(out, golden.rotary_mul(x.double(), cos.double(), sin.double(), mode), op="npu_rotary_mul")


def test_rotary_mul_on_the_halves_of_a_fused_qkv_projection(torch_npu):
    """q and k as the strided slices of one [B, S, 3, N, D] projection, rotated in BSND."""
    qkv = randn(2, 5, 3, 4, 16)
    angles = randn(1, 5, 1, 16, seed=1)
    for part in (0, 1):
        x = qkv[:, :, part]
        assert not x.is_contiguous()
        out = torch_npu.npu_rotary_mul(x, angles.cos(), angles.sin())
        close(out, golden.rotary_mul(x.double(), angles.cos().double(), angles.sin().double()), op="npu_rotary_mul")


def _rope_reference(x, cos, sin):
    return golden.rotary_mul(x.double(), cos.double(), sin.double()).to(x.dtype)


def test_apply_rotary_pos_emb_writes_through_contiguous_slices_exactly(torch_npu):
    """Query and key as contiguous slices of larger caches (storage offsets): exactly their elements
    change, to the rotated values; the returned tensors hold them too."""
    q_cache, k_cache = randn(4, 6, 2, 64), randn(4, 6, 1, 64, seed=1)
    angles = randn(2, 6, 1, 64, seed=2)
    cos, sin = angles.cos(), angles.sin()
    q, k = q_cache[1:3], k_cache[2:4]
    q_before, k_before, q_cache_before, k_cache_before = q.clone(), k.clone(), q_cache.clone(), k_cache.clone()
    q_out, k_out = torch_npu.npu_apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(q, _rope_reference(q_before, cos, sin))
    torch.testing.assert_close(k, _rope_reference(k_before, cos, sin))
    assert torch.equal(q_out, q) and torch.equal(k_out, k)
    assert torch.equal(q_cache[[0, 3]], q_cache_before[[0, 3]]) and torch.equal(k_cache[:2], k_cache_before[:2])


def test_apply_rotary_pos_emb_rotates_a_shared_query_and_key_once(torch_npu):
    x = randn(2, 6, 1, 64)
    angles = randn(2, 6, 1, 64, seed=2)
    expected = _rope_reference(x, angles.cos(), angles.sin())
    torch_npu.npu_apply_rotary_pos_emb(x, x, angles.cos(), angles.sin())
    torch.testing.assert_close(x, expected)


def test_apply_rotary_pos_emb_refuses_strided_views_and_writes_nothing(torch_npu):
    """"要求为连续的Tensor": the slices of a fused QKV projection are refused, the projection untouched."""
    qkv = randn(2, 6, 3, 2, 64)
    before = qkv.clone()
    angles = randn(2, 6, 1, 64, seed=2)
    with pytest.raises(NpuOpError, match="query must be contiguous"):
        torch_npu.npu_apply_rotary_pos_emb(qkv[:, :, 0], qkv[:, :, 1], angles.cos(), angles.sin())
    with pytest.raises(NpuOpError, match="cos must be contiguous"):
        torch_npu.npu_apply_rotary_pos_emb(qkv[:, :, 0].contiguous(), qkv[:, :, 1].contiguous(),
                                           angles.cos()[:1].expand(2, -1, -1, -1), angles.sin())
    assert torch.equal(qkv, before)


# ----------------------------------------------------------------------------- norms, activations, routers


@pytest.mark.parametrize("kind", views.KINDS)
def test_rms_norms_on_views(torch_npu, kind):
    x, residual, gamma = randn(3, 4, 32), randn(3, 4, 32, seed=1), randn(32, seed=2)
    xv, rv = views.view(x, kind), views.view(residual, kind)
    y, rstd = torch_npu.npu_rms_norm(xv, gamma)
    want_y, want_rstd = golden.rms_norm(xv.double(), gamma.double())
    close(y, want_y, op="npu_rms_norm")
    close(rstd, want_rstd.double(), op="npu_rms_norm")
    y, _, summed = torch_npu.npu_add_rms_norm(xv, rv, gamma)
    close(y, golden.rms_norm(xv.double() + rv.double(), gamma.double())[0], op="npu_add_rms_norm")
    close(summed, xv.double() + rv.double(), op="npu_add_rms_norm")
    if not xv.is_contiguous():  # npu_gemma_rms_norm: "no non-contiguous tensors"
        with pytest.raises(NpuOpError, match="self must be contiguous"):
            torch_npu.npu_gemma_rms_norm(xv, gamma)


@pytest.mark.parametrize("kind", views.KINDS)
def test_moe_gating_on_views(torch_npu, kind):
    logits = randn(6, 16)
    view = views.view(logits, kind)
    got = torch_npu.npu_moe_gating_top_k_softmax(view, None, 4)
    want = golden.gating_top_k_softmax(view, None, 4)
    close(got[0], want[0].double(), op="npu_moe_gating_top_k_softmax")
    assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
    bias = views.view(randn(16, seed=1), kind)  # None for the kinds a 1-D tensor has no room for
    got = torch_npu.npu_moe_gating_top_k(view, 4, bias=bias, k_group=2, group_count=4, norm_type=1)
    want = golden.gating_top_k(view, 4, bias=bias, k_group=2, group_count=4, norm_type=1)
    close(got[0], want[0].double(), op="npu_moe_gating_top_k")
    assert torch.equal(got[1], want[1])


# ----------------------------------------------------------------------------- grouped matmul


def test_grouped_matmul_transposition_rules(torch_npu):
    """Its page: "x不支持转置" and weights "是否转置需保持统一" (group_list tensor or none); an
    nn.Linear weight passed as ``.t()`` (a transposed [K, N]) is the documented way in."""
    x = randn(6, 8)
    linears = [torch.nn.Linear(8, 4, bias=False) for _ in range(3)]
    weights = [lin.weight.detach().t() for lin in linears]
    group_list = torch.tensor([2, 5, 6])
    with torch.no_grad():
        out = torch_npu.npu_grouped_matmul([x], weights, group_list=group_list, group_type=0, split_item=2)[0]
        want = torch.cat([lin(part) for lin, part in zip(linears, x.split([2, 3, 1]))])
        torch.testing.assert_close(out, want)
        with pytest.raises(NpuOpError, match="x\\[0\\] is transposed"):
            torch_npu.npu_grouped_matmul([randn(8, 6).t()], weights, group_list=group_list, group_type=0, split_item=2)
        with pytest.raises(NpuOpError, match="mixes transposed and untransposed"):
            torch_npu.npu_grouped_matmul([x], [weights[0], weights[1].contiguous(), weights[2]], group_list=group_list,
                                         group_type=0, split_item=2)
        # the int-list overload documents no transposition rule: a transposed x gives its values' result
        xt = views.view(x, "transpose")
        by_list = torch_npu.npu_grouped_matmul([xt], weights, group_list=[2, 5, 6], group_type=0)
        torch.testing.assert_close(torch.cat(by_list), want)


# ----------------------------------------------------------------------------- fused optimizers


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", [NpuFusedAdamW, lambda p: NpuFusedSGD(p, lr=0.1, momentum=0.9)],
                         ids=["adamw", "sgd"])
def test_fused_optimizers_update_non_contiguous_parameters_like_contiguous_ones(optimizer):
    """Parameters stored transposed (a tied ``weight.t()``) or as a strided slice take the same steps."""
    base = randn(8, 6)
    layouts = [views.view(base, kind) for kind in ("transpose", "step")] + [base.clone()]
    runs = []
    for layout in layouts:
        param = torch.nn.Parameter(layout)
        opt = optimizer([param])
        for step in range(4):
            opt.zero_grad()
            (param * randn(8, 6, seed=10 + step)).square().sum().backward()
            opt.step()
        runs.append(param.detach())
    for run in runs[:-1]:
        torch.testing.assert_close(run, runs[-1], rtol=0, atol=0)
