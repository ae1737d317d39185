"""PFA / IFA / FIA against the float64 reference of ``attention_ref`` (written independently
of the emulator's core), with logits ``scale * QK^T + pse_shift``. These ops are fp16/bf16 only."""

from __future__ import annotations

import math

import pytest
import torch

import npu_migrate.kernels._attention_core as core
from npu_migrate.kernels._checks import NpuOpError
from npu_migrate.kernels.infer_attention import (
    npu_fused_infer_attention_score,
    npu_incre_flash_attention,
    npu_prompt_flash_attention,
)
from tests.kernels.attention_ref import (  # noqa: F401 (small_blocks: an autouse fixture)
    INT_MAX, band, compressed, from_layout, reference, small_blocks, to_layout,
)
from tests.tolerances import tolerance

B, N, NKV, SQ, SKV, D = 2, 4, 2, 19, 29, 16
SCALE = 1 / math.sqrt(D)
HALF = torch.float16


def qkv(dtype=HALF, sq=SQ, skv=SKV, nkv=NKV, d=D, b=B):
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(b, N, sq, d, generator=gen).to(dtype), torch.randn(b, nkv, skv, d, generator=gen).to(dtype),
            torch.randn(b, nkv, skv, d, generator=gen).to(dtype))


def close(out, ref, dtype=HALF, *, op):
    torch.testing.assert_close(out.double(), ref, **tolerance(op, dtype))


def lay(t, layout):
    return to_layout(t, "BNSD" if layout == "BNSD_BSND" else layout)


# ----------------------------------------------------------------------------- PFA

@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD", "BNSD_BSND"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_pfa_layouts_gqa(layout, dtype):
    q, k, v = qkv(dtype)
    mask = torch.rand(B, 1, SQ, SKV, generator=torch.Generator().manual_seed(1)) < 0.3
    out = npu_prompt_flash_attention(lay(q, layout), lay(k, layout), lay(v, layout), atten_mask=mask, num_heads=N,
                                     num_key_value_heads=NKV, scale_value=SCALE, next_tokens=INT_MAX,
                                     input_layout=layout)
    out_layout = "BSND" if layout == "BNSD_BSND" else layout
    assert out.dtype == dtype and out.shape == to_layout(q, out_layout).shape
    close(from_layout(out, out_layout, N), reference(q, k, v, scale=SCALE, mask=mask), dtype, op="npu_prompt_flash_attention")


def test_pfa_default_next_tokens_zero_makes_a_mask_causal():
    q, k, v = qkv()
    padding = torch.zeros(SQ, SKV, dtype=torch.bool)
    padding[:, -3:] = True
    out = npu_prompt_flash_attention(q, k, v, atten_mask=padding, num_heads=N, num_key_value_heads=NKV,
                                     scale_value=SCALE, input_layout="BNSD")
    close(out, reference(q, k, v, scale=SCALE, mask=padding | band(SQ, SKV, INT_MAX, 0)), op="npu_prompt_flash_attention")
    no_mask = npu_prompt_flash_attention(q, k, v, num_heads=N, num_key_value_heads=NKV, scale_value=SCALE,
                                         input_layout="BNSD")
    close(no_mask, reference(q, k, v, scale=SCALE), op="npu_prompt_flash_attention")  # without a mask, pre/next are ignored


@pytest.mark.parametrize("mode", [2, 3, 4])
def test_pfa_compressed_sparse_modes(mode):
    q, k, v = qkv()
    expected = {2: band(SQ, SKV, INT_MAX, 0), 3: band(SQ, SKV, INT_MAX, 0, True), 4: band(SQ, SKV, 4, 2, True)}[mode]
    out = npu_prompt_flash_attention(q, k, v, atten_mask=compressed(), num_heads=N, num_key_value_heads=NKV,
                                     scale_value=SCALE, input_layout="BNSD", sparse_mode=mode, pre_tokens=4,
                                     next_tokens=2)
    close(out, reference(q, k, v, scale=SCALE, mask=expected), op="npu_prompt_flash_attention")


def test_pfa_pse_shift_is_added_after_the_scale():
    q, k, v = qkv()
    pse = torch.randn(1, N, SQ, SKV, generator=torch.Generator().manual_seed(2)).to(HALF)
    out = npu_prompt_flash_attention(q, k, v, pse_shift=pse, num_heads=N, num_key_value_heads=NKV,
                                     scale_value=SCALE, input_layout="BNSD")
    close(out, reference(q, k, v, scale=SCALE, pse=pse, pse_scaled=False), op="npu_prompt_flash_attention")


def test_pfa_actual_lengths_are_per_batch_and_anchor_causal():
    q, k, v = qkv()
    q_lens, kv_lens = [7, SQ], [20, 11]
    out = npu_prompt_flash_attention(q, k, v, atten_mask=compressed(), num_heads=N, num_key_value_heads=NKV,
                                     scale_value=SCALE, input_layout="BNSD", sparse_mode=3,
                                     actual_seq_lengths=q_lens, actual_seq_lengths_kv=kv_lens)
    for b, (sq, skv) in enumerate(zip(q_lens, kv_lens)):
        ref = reference(q[b:b + 1, :, :sq], k[b:b + 1, :, :skv], v[b:b + 1, :, :skv], scale=SCALE,
                        mask=band(sq, skv, INT_MAX, 0, True))
        close(out[b:b + 1, :, :sq], ref, op="npu_prompt_flash_attention")
        assert out[b, :, sq:].abs().max() == 0 if sq < SQ else True


# ----------------------------------------------------------------------------- IFA

def _paged(k, v, block_size, lengths, seed=3):
    """Scatter contiguous BNSD K/V into a shuffled block pool [num_blocks, block_size, Nkv*D]."""
    b, nkv, s, d = k.shape
    per = math.ceil(s / block_size)
    order = torch.randperm(b * per, generator=torch.Generator().manual_seed(seed))
    pool_k = torch.zeros(b * per + 1, block_size, nkv * d, dtype=k.dtype)
    pool_v = torch.zeros_like(pool_k)
    table = torch.full((b, per + 1), -1, dtype=torch.int32)
    for i in range(b):
        flat = lambda t: torch.nn.functional.pad(t[i].transpose(0, 1).reshape(s, nkv * d), (0, 0, 0, per * block_size - s))  # noqa: E731
        for j in range(per):
            blk = int(order[i * per + j])
            table[i, j] = blk
            pool_k[blk] = flat(k)[j * block_size:(j + 1) * block_size]
            pool_v[blk] = flat(v)[j * block_size:(j + 1) * block_size]
    return pool_k, pool_v, table


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD"])
def test_ifa_decode_with_lengths_and_mask(layout):
    q, k, v = qkv(sq=1)
    lengths = [SKV, 13]
    mask = torch.rand(B, SKV + 3, generator=torch.Generator().manual_seed(4)) < 0.2  # (B, Skv) padded with extra columns
    out = npu_incre_flash_attention(lay(q, layout), lay(k, layout), lay(v, layout), atten_mask=mask,
                                    actual_seq_lengths=lengths, num_heads=N, num_key_value_heads=NKV,
                                    scale_value=SCALE, input_layout=layout)
    out = from_layout(out, layout, N)
    for b, skv in enumerate(lengths):
        ref = reference(q[b:b + 1], k[b:b + 1, :, :skv], v[b:b + 1, :, :skv], scale=SCALE, mask=mask[b, :skv])
        close(out[b:b + 1], ref, op="npu_incre_flash_attention")


def test_ifa_paged_kv_equals_contiguous():
    q, k, v = qkv(sq=1, skv=40)
    lengths = [40, 21]
    pool_k, pool_v, table = _paged(k, v, 16, lengths)
    common = dict(actual_seq_lengths=lengths, num_heads=N, num_key_value_heads=NKV, scale_value=SCALE, input_layout="BSH")
    paged = npu_incre_flash_attention(to_layout(q, "BSH"), pool_k, pool_v, block_table=table, block_size=16, **common)
    contiguous = npu_incre_flash_attention(to_layout(q, "BSH"), to_layout(k, "BSH"), to_layout(v, "BSH"), **common)
    torch.testing.assert_close(paged, contiguous, atol=0, rtol=0)


# ----------------------------------------------------------------------------- FIA

def test_fia_prefill_defaults_and_lse():
    q, k, v = qkv()
    mask = torch.rand(SQ, SKV, generator=torch.Generator().manual_seed(5)) < 0.3
    out, lse = npu_fused_infer_attention_score(q, k, v, atten_mask=mask, num_heads=N, num_key_value_heads=NKV,
                                               scale=SCALE, input_layout="BNSD", softmax_lse_flag=True)
    close(out, reference(q, k, v, scale=SCALE, mask=mask), op="npu_fused_infer_attention_score")  # next_tokens defaults to INT_MAX: not causal
    logits = (SCALE * q.double() @ k.double().repeat_interleave(2, 1).transpose(-1, -2)).masked_fill(mask, -math.inf)
    assert lse.shape == (B, N, SQ, 1) and lse.dtype == torch.float32
    # lse = max + log(sum) with the sum of Skv exps accumulated in float32 over blocks (vs float64 here)
    torch.testing.assert_close(lse.double(), torch.logsumexp(logits, -1, keepdim=True), atol=1e-4, rtol=1e-5)
    _, no_lse = npu_fused_infer_attention_score(q, k, v, num_heads=N, num_key_value_heads=NKV, input_layout="BNSD")
    assert no_lse.shape == (1,) and no_lse.dtype == torch.float32 and no_lse.item() == 0


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD", "BNSD_BSND"])
def test_fia_decode(layout):
    q, k, v = qkv(torch.bfloat16, sq=1)
    mask = torch.rand(B, SKV, generator=torch.Generator().manual_seed(6)) < 0.3
    out, _ = npu_fused_infer_attention_score(lay(q, layout), lay(k, layout), lay(v, layout), atten_mask=mask,
                                             num_heads=N, num_key_value_heads=NKV, scale=SCALE, input_layout=layout)
    out_layout = "BSND" if layout == "BNSD_BSND" else layout
    close(from_layout(out, out_layout, N), reference(q, k, v, scale=SCALE, mask=mask[:, None, None]), torch.bfloat16, op="npu_fused_infer_attention_score")


def test_fia_paged_prefill_equals_contiguous():
    q, k, v = qkv(sq=5, skv=300)
    common = dict(actual_seq_lengths_kv=[300, 170], num_heads=N, num_key_value_heads=NKV, scale=SCALE,
                  input_layout="BSH", atten_mask=compressed(), sparse_mode=3)
    pool_k, pool_v, table = _paged(k, v, 128, [300, 170])
    paged, _ = npu_fused_infer_attention_score(to_layout(q, "BSH"), pool_k, pool_v, block_table=table, block_size=128, **common)
    contiguous, _ = npu_fused_infer_attention_score(to_layout(q, "BSH"), to_layout(k, "BSH"), to_layout(v, "BSH"), **common)
    torch.testing.assert_close(paged, contiguous, atol=0, rtol=0)
    ref = reference(q[1:], k[1:, :, :170], v[1:, :, :170], scale=SCALE, mask=band(5, 170, INT_MAX, 0, True))
    close(from_layout(paged, "BSH", N)[1:], ref, op="npu_fused_infer_attention_score")


@pytest.mark.parametrize("inner_precise,dead_rows", [(0, "mean"), (2, "zero")])
def test_fia_invalid_row_correction(inner_precise, dead_rows):
    q, k, v = qkv(sq=SKV, skv=SQ)
    out, _ = npu_fused_infer_attention_score(q, k, v, atten_mask=compressed(), sparse_mode=3, num_heads=N,
                                             num_key_value_heads=NKV, scale=SCALE, input_layout="BNSD",
                                             inner_precise=inner_precise)
    assert not out.isnan().any()
    close(out, reference(q, k, v, scale=SCALE, mask=band(SKV, SQ, INT_MAX, 0, True), dead_rows=dead_rows), op="npu_fused_infer_attention_score")


# ----------------------------------------------------------------------------- errors

OPS = {
    "pfa": lambda q, k, v, **kw: npu_prompt_flash_attention(q, k, v, num_heads=N, num_key_value_heads=NKV, input_layout="BNSD", **kw),
    "ifa": lambda q, k, v, **kw: npu_incre_flash_attention(q[:, :, :1], k, v, num_heads=N, num_key_value_heads=NKV, input_layout="BNSD", **kw),
    "fia": lambda q, k, v, **kw: npu_fused_infer_attention_score(q, k, v, num_heads=N, num_key_value_heads=NKV, input_layout="BNSD", **kw),
}


@pytest.mark.parametrize("op", list(OPS))
def test_no_backward_under_autograd(op):
    q, k, v = qkv()
    with pytest.raises(NpuOpError, match="has no backward on a real NPU"):
        OPS[op](q.requires_grad_(), k, v)
    with torch.no_grad():
        OPS[op](q, k, v)  # fine on an inference path


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype,match", [(torch.float32, "float16, bfloat16"), (torch.float64, "float64")])
def test_half_types_only(op, dtype, match):
    q, k, v = qkv(dtype)
    with pytest.raises(NpuOpError, match=match):
        OPS[op](q, k, v)


@pytest.mark.parametrize("op", list(OPS))
def test_float_mask_refused(op):
    q, k, v = qkv()
    with pytest.raises(NpuOpError, match="additive float mask"):
        OPS[op](q, k, v, atten_mask=torch.zeros(1, 1, SQ, SKV, dtype=HALF))


def test_infer_errors():
    q, k, v = qkv()
    with pytest.raises(NpuOpError, match="set num_key_value_heads for GQA"):
        npu_prompt_flash_attention(to_layout(q, "BSH"), to_layout(k, "BSH"), to_layout(v, "BSH"), num_heads=N)
    with pytest.raises(NpuOpError, match="multiple of num_key_value_heads"):
        npu_prompt_flash_attention(q, k[:, :1].repeat(1, 3, 1, 1), v[:, :1].repeat(1, 3, 1, 1), num_heads=N,
                                   num_key_value_heads=3, input_layout="BNSD")
    with pytest.raises(NpuOpError, match=r"D must be in \[1, 512\]"):
        big = torch.zeros(1, N, 2, 528, dtype=HALF)
        npu_prompt_flash_attention(big, big, big, num_heads=N, input_layout="BNSD")
    with pytest.raises(NpuOpError, match="needs the compressed 2048x2048"):
        OPS["pfa"](q, k, v, sparse_mode=3)
    with pytest.raises(NpuOpError, match="atten_mask shape"):
        OPS["pfa"](q, k, v, atten_mask=torch.zeros(B, N, SQ, SKV, dtype=torch.bool))
    with pytest.raises(NpuOpError, match="not emulated"):
        OPS["pfa"](q, k, v, quant_scale2=torch.ones(1))
    with pytest.raises(NpuOpError, match="one query token"):
        npu_incre_flash_attention(q, k, v, num_heads=N, num_key_value_heads=NKV, input_layout="BNSD")
    pool_k, pool_v, table = _paged(k, v, 16, [SKV, SKV])
    with pytest.raises(NpuOpError, match="block_table must be int32"):
        npu_incre_flash_attention(to_layout(q[:, :, :1], "BSH"), pool_k, pool_v, block_table=table.long(), block_size=16,
                                  actual_seq_lengths=[SKV, SKV], num_heads=N, num_key_value_heads=NKV)
    with pytest.raises(NpuOpError, match="needs the per-batch KV lengths"):
        npu_incre_flash_attention(to_layout(q[:, :, :1], "BSH"), pool_k, pool_v, block_table=table, block_size=16,
                                  num_heads=N, num_key_value_heads=NKV)
    with pytest.raises(NpuOpError, match="multiple of 128"):
        npu_fused_infer_attention_score(to_layout(q, "BSH"), pool_k, pool_v, block_table=table, block_size=16,
                                        actual_seq_lengths_kv=[SKV, SKV], num_heads=N, num_key_value_heads=NKV)
    with pytest.raises(NpuOpError, match="not cumulative"):
        OPS["pfa"](q, k, v, actual_seq_lengths_kv=[SKV, 2 * SKV])
