"""The fused kernels in the modes people train and serve in (issue 19), each against the original
eager code on the emulator: attention and rotary under autocast (the kernel in the precision the
original computes in), padded batches (rows with every key masked get the original's value on the
device, no sync), rotary tables of any broadcastable shape, Gemma's norm with a backward."""

import pytest
import torch

from tests.helpers.dispatch_counts import OpCounter
from tests.helpers.support import HELPERS, KERNELS, qkv, tolerance
from tests.tolerances import recorded

ATTENTION = "torch.nn.functional.scaled_dot_product_attention"
MIN = "dtype min"


def rotary_tolerance(dtype):
    return recorded("pattern.rotary.half", dtype)


def eager(q, k, v, mask, scale):
    """transformers' eager_attention_forward (no GQA): softmax in float32, cast back to q's dtype."""
    scores = torch.matmul(q, k.transpose(2, 3)) * scale
    if mask is not None:
        scores = scores + mask
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(probs, v)


def padding_mask(lengths, s, dtype=torch.float32, fill=MIN):
    """transformers' eager causal mask with left padding: [B, 1, S, S], 0 or ``fill``."""
    fill = torch.finfo(dtype).min if fill == MIN else fill
    keep = torch.ones(s, s, dtype=torch.bool).tril()[None, None].repeat(len(lengths), 1, 1, 1)
    for row, length in enumerate(lengths):
        keep[row, :, :, : s - length] = False
    return torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, fill)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


@pytest.mark.slow
@pytest.mark.parametrize("amp", [torch.bfloat16, torch.float16])
def test_attention_under_autocast_runs_the_kernel_in_autocasts_dtype(glue, spy, amp):
    """Under autocast q and k come out of the rotary in float32 and v out of a Linear in the autocast
    dtype: mixed dtypes, which the original's matmuls cast to autocast's dtype; so does the call."""
    q, k, v = qkv(sq=6, skv=6)
    v = v.to(amp)
    mask = padding_mask([6, 6], 6)
    with torch.autocast("cpu", dtype=amp):
        want = eager(q, k, v, mask, 0.25)
        assert glue.can_fuse(q, k, v, additive=mask)
        got = glue.fusion_attention(q, k, v, q.shape[1], additive=mask, scale=0.25)
    assert got.dtype == want.dtype == amp
    assert [a[0].dtype for a in spy.args["npu_fusion_attention"]] == [amp]
    torch.testing.assert_close(got, want, **tolerance(ATTENTION, amp))
    assert not glue.can_fuse(q, k, v)  # outside autocast the original's matmul would raise on them


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fill", [MIN, float("-inf")], ids=["finfo-min", "minus-inf"])
def test_left_padding_rows_get_the_originals_values_on_the_device(glue, spy, dtype, fill):
    """finfo.min rows: the original's softmax is uniform over the keys (the scores vanish against the
    mask); -inf rows: NaN. Both without a device->host sync for the rows."""
    q, k, v = qkv(sq=6, skv=6, dtype=dtype)
    mask = padding_mask([6, 3], 6, dtype, fill)
    want = eager(q, k, v, mask, 0.25)
    with OpCounter([HELPERS], excluded=[KERNELS]) as counter:
        assert glue.can_fuse(q, k, v, additive=mask, mask_values_proven=True)
        got = glue.fusion_attention(q, k, v, q.shape[1], additive=mask, scale=0.25)
    assert counter.counts["sync"] == 0 and spy["npu_fusion_attention"] == 1
    dead = mask.eq(mask.amax()).logical_not().all(-1)[1, 0]  # the padded query rows of the second sequence
    assert dead.tolist() == [True, True, True, False, False, False]
    assert torch.isnan(want[1, :, :3]).all() == (fill == float("-inf"))
    torch.testing.assert_close(got, want, equal_nan=True, **tolerance(ATTENTION, dtype))


@pytest.mark.slow
def test_padded_rows_in_float16_or_with_gradients_fall_back_with_a_reason(glue):
    """float16 scores plus -65504 still depend on the scores, and the kernel's gradient of a dead row
    is not the original's: those calls run the original (one sync finds the dead row)."""
    q, k, v = qkv(sq=4, skv=4, dtype=torch.float16)
    mask = padding_mask([4, 2], 4, torch.float16)
    assert not glue.can_fuse(q, k, v, additive=mask, mask_values_proven=True)
    q32, k32, v32 = (t.float().requires_grad_() for t in (q, k, v))
    assert not glue.can_fuse(q32, k32, v32, additive=padding_mask([4, 2], 4), mask_values_proven=True)
    assert glue.can_fuse(q32, k32, v32, additive=padding_mask([4, 4], 4), mask_values_proven=True)


@pytest.mark.slow
@pytest.mark.parametrize("amp", [torch.bfloat16, torch.float16])
def test_rotary_of_a_low_precision_x_with_float32_tables_computes_in_float32(glue, spy, amp):
    """Llama under autocast: q from a Linear in autocast's dtype, cos/sin float32: the original's
    products promote to float32 (no autocast list has them); the kernel gets x widened."""
    x = torch.randn(2, 4, 5, 8).to(amp)
    cos, sin = torch.randn(2, 1, 5, 8), torch.randn(2, 1, 5, 8)
    want = x * cos + rotate_half(x) * sin
    assert glue.rotary_fits(x, cos, sin, "half")
    got = glue.rotary_mul(x, cos, sin, "half")
    assert got.dtype == want.dtype == torch.float32 and spy["npu_rotary_mul"] == 1
    torch.testing.assert_close(got, want, **rotary_tolerance(torch.float32))


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(1, 4, 5, 8), (2, 4, 5, 8), (5, 8), (5, 1, 8)], ids=["per-head", "full", "SD", "S1D"])
def test_rotary_tables_of_any_broadcastable_shape(glue, spy, shape):
    """Per-head tables [1, N, S, D] fit none of the kernel's table layouts: they reach it expanded
    to x's shape (half mode takes full-shape tables); 2-D and 3-D tables as the 4-D tables they
    broadcast as (``(S, D)`` against BNSD, ``(S, 1, D)`` against BSND)."""
    x = torch.randn(2, 5, 4, 8) if len(shape) == 3 else torch.randn(2, 4, 5, 8)  # BSND for (S, 1, D)
    cos, sin = torch.randn(shape), torch.randn(shape)
    want = x * cos + rotate_half(x) * sin
    assert glue.rotary_fits(x, cos, sin, "half")
    torch.testing.assert_close(glue.rotary_mul(x, cos, sin, "half"), want, **rotary_tolerance(torch.float32))
    assert spy["npu_rotary_mul"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("amp", [torch.bfloat16, torch.float16])
def test_sdpa_under_autocast_casts_as_sdpa_does(glue, spy, amp):
    """SDPA is on autocast's lower-precision list: mixed float32 q/k and low-precision v are cast."""
    q, k, v = qkv(sq=5, skv=5)
    v = v.to(amp)
    with torch.autocast("cpu", dtype=amp):
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        got = glue.sdpa(q, k, v, is_causal=True)
    assert got.dtype == want.dtype == amp and spy["npu_fusion_attention"] == 1
    torch.testing.assert_close(got, want, **tolerance(ATTENTION, amp))
