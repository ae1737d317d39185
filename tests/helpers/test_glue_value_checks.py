"""npu_glue's value conditions (an additive mask holds 0 or minus infinity, no row is masked entirely)
are read on every call that needs them, in one device->host sync per call, and never remembered:
a mask changed in place, through ``.data`` or at a freed tensor's address gets a fresh verdict and a
fresh conversion; masks are converted from their current values on every call (a causal buffer's
slice too); rotary tables are not checked (the kernel takes any values); a rule's proof skips a
check; under torch.compile an unproven condition is never evaluated (the original path runs)."""

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.support import counted, dispatcher_op, qkv, tolerance

MINUS_INF = float("-inf")


def causal_additive(s, value=MINUS_INF):
    return torch.full((s, s), value).triu(1)


def bias(s):
    return torch.randn(s, s, generator=torch.Generator().manual_seed(3))  # not a 0 / -inf mask


def test_one_sync_per_call_and_a_fresh_conversion(glue):
    q, k, v = qkv()
    mask = causal_additive(5)
    for _ in range(3):  # every layer of the forward pass: nothing from the earlier call is reused
        again, ops = counted(lambda: (glue.can_fuse(q, k, v, additive=mask), glue.npu_mask(q, k, additive=mask)))
        assert again[0] and ops.counts["sync"] == 1
    converted = glue.npu_mask(q, k, additive=mask)
    assert converted.shape == (2, 1, 5, 5) and torch.equal(converted[1, 0], torch.ones(5, 5, dtype=torch.bool).triu(1))


@pytest.mark.parametrize("write", ["in_place", "data", "foreach", "data_set"])
def test_a_changed_mask_gets_a_fresh_verdict_and_conversion(glue, write):
    """In place (the version moves), through ``.data`` or ``torch._foreach_*`` (it need not), or its
    storage replaced: the verdict and the converted mask follow the values."""
    q, k, v = qkv()
    mask = causal_additive(5)
    assert glue.can_fuse(q, k, v, additive=mask)
    new = torch.zeros(5, 5)
    new[:, 3:] = MINUS_INF  # every query sees keys 0..2 only
    if write == "in_place":
        mask.copy_(new)
    elif write == "data":
        mask.data.copy_(new)
    elif write == "foreach":
        torch._foreach_copy_([mask], [new])
    else:
        mask.data = new
    assert glue.can_fuse(q, k, v, additive=mask)
    torch.testing.assert_close(glue.npu_mask(q, k, additive=mask)[0, 0], new == MINUS_INF)
    mask.data.copy_(bias(5))  # no longer a 0 / -inf mask
    assert not glue.can_fuse(q, k, v, additive=mask)
    mask.data.copy_(causal_additive(5))
    mask.data[2] = MINUS_INF  # a row masked entirely: fused, the row made NaN on the device as the original's
    assert glue.can_fuse(q, k, v, additive=mask)
    assert not glue.can_fuse(*(t.clone().requires_grad_() for t in (q, k, v)), additive=mask)  # unless training


def test_a_bool_key_padding_mask_written_through_data(glue, spy):
    """The issue's case: a bool padding mask changed through ``.data`` between calls."""
    q, k, v = qkv()
    masked = torch.zeros(2, 1, 1, 5, dtype=torch.bool)
    masked[0, ..., 3:] = True

    def original():
        scores = (q @ k.transpose(-2, -1)).masked_fill(masked, MINUS_INF)
        return scores.softmax(-1) @ v

    for lengths in ((3, 5), (5, 2), (1, 4)):
        masked.data.copy_(torch.arange(5) >= torch.tensor(lengths)[:, None, None, None])
        assert glue.can_fuse(q, k, v, masked=masked)
        got = glue.torch_npu.npu_fusion_attention(q, k, v, 4, "BNSD", atten_mask=glue.npu_mask(q, k, masked=masked))[0]
        torch.testing.assert_close(got, original())
    assert spy["npu_fusion_attention"] == 3


@pytest.mark.parametrize("change", ["fill", "load_state_dict", "data"])
def test_a_causal_buffer_is_handed_to_the_kernel_as_it_is_now(glue, spy, change):
    """A buffer built with ``torch.tril`` and changed later (a prefix-LM's ``fill_(1)``, a checkpoint,
    a ``.data`` write): the kernel gets its current values, never the causal mode."""
    q, k, v = qkv(sq=5, skv=5)
    module = torch.nn.Module()
    module.register_buffer("bias", torch.tril(torch.ones(8, 8)).view(1, 1, 8, 8))

    def original():
        scores = (q @ k.transpose(-2, -1)).masked_fill(module.bias[:, :, :5, :5] == 0, MINUS_INF)
        return scores.softmax(-1) @ v

    def fused():
        causal = module.bias[:, :, :5, :5]
        assert glue.can_fuse(q, k, v, causal=causal)
        return glue.torch_npu.npu_fusion_attention(q, k, v, 4, "BNSD", atten_mask=glue.npu_mask(q, k, causal=causal))[0]

    torch.testing.assert_close(fused(), original())
    prefix = torch.tril(torch.ones(8, 8))
    prefix[:, :3] = 1  # prefix-LM: the first 3 keys are seen by every query
    if change == "fill":
        module.bias.fill_(1)
    elif change == "load_state_dict":
        module.load_state_dict({"bias": prefix.view(1, 1, 8, 8)})
    else:
        module.bias.data.copy_(prefix)
    torch.testing.assert_close(fused(), original())
    assert spy["npu_fusion_attention"] == 2
    module.bias.data[:, :, 2] = 0  # a row that sees no key: the original gives NaN there
    assert not glue.can_fuse(q, k, v, causal=module.bias[:, :, :5, :5])


def test_proofs_skip_the_checks(glue):
    q, k, v = qkv()
    mask = causal_additive(5)
    fused, ops = counted(glue.can_fuse, q, k, v, additive=mask, mask_values_proven=True, live_rows_proven=True)
    assert fused and ops.counts["sync"] == 0
    # a proof is trusted: the rule passes it only where the code that builds the mask proves it
    assert glue.can_fuse(q, k, v, additive=bias(5), mask_values_proven=True, live_rows_proven=True)
    fused, ops = counted(glue.can_fuse, q, k, v, additive=causal_additive(5), mask_values_proven=True)
    assert fused and ops.counts["sync"] == 0  # dead rows get the original's values on the device: no check
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    fused, ops = counted(glue.can_fuse, q, k, v, additive=causal_additive(5), mask_values_proven=True)
    assert fused and ops.counts["sync"] == 1  # with gradients needed live rows are checked


def test_fused_result_with_proofs_matches_the_original(glue):
    q, k, v = qkv()
    mask = causal_additive(5)
    assert glue.can_fuse(q, k, v, additive=mask, mask_values_proven=True, live_rows_proven=True)
    got = glue.torch_npu.npu_fusion_attention(q, k, v, 4, "BNSD", atten_mask=glue.npu_mask(q, k, additive=mask),
                                              scale=8 ** -0.5)[0]
    want = torch.softmax(q @ k.transpose(-2, -1) * 8 ** -0.5 + mask, dim=-1) @ v
    torch.testing.assert_close(got, want)


def test_inference_tensors_are_checked_on_every_call(glue):
    q, k, v = qkv()
    with torch.inference_mode():
        mask = causal_additive(5)
        syncs = [counted(glue.can_fuse, q, k, v, additive=mask)[1].counts["sync"] for _ in range(2)]
        mask.copy_(bias(5))
        assert not glue.can_fuse(q, k, v, additive=mask)
    assert syncs == [1, 1]


def test_bool_sdpa_mask_needs_no_sync_and_is_inverted_per_call(glue, spy):
    q, k, v = qkv(sq=4, skv=6)
    keep = torch.rand(2, 1, 4, 6, generator=torch.Generator().manual_seed(1)) > 0.3
    outs, ops = counted(lambda: [glue.sdpa(q, k, v, attn_mask=keep) for _ in range(3)])
    assert spy["npu_fusion_attention"] == 3 and ops.counts["sync"] == 0 and ops.ops["bitwise_not"] == 3
    torch.testing.assert_close(outs[-1], F.scaled_dot_product_attention(q, k, v, attn_mask=keep))
    keep.data.copy_(~keep)  # written through .data: the next call sees it
    torch.testing.assert_close(glue.sdpa(q, k, v, attn_mask=keep), F.scaled_dot_product_attention(q, k, v, attn_mask=keep))


def rope_table(s, d, scale=1.0):
    angles = torch.arange(s, dtype=torch.float32)[:, None] * torch.rand(d // 2, generator=torch.Generator().manual_seed(0))
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos() * scale, angles.sin() * scale


@pytest.mark.slow
@pytest.mark.parametrize("scale", [1.0, 1.5])  # 1.5: e.g. Hugging Face's attention_scaling
def test_rotary_tables_are_not_checked(glue, scale):
    """The kernel computes x * r1 + rotate(x) * r2 for any table values: no sync, scaled tables fuse."""
    cos, sin = rope_table(16, 8, scale)
    x = torch.randn(2, 16, 4, 8)
    fit, ops = counted(glue.rotary_fits, x, cos[None, :, None, :], sin[None, :, None, :])
    assert fit and ops.counts["sync"] == 0
    got = glue.rotary_mul(x, cos[None, :, None, :], sin[None, :, None, :])
    x1, x2 = x.chunk(2, dim=-1)
    want = x * cos[None, :, None, :] + torch.cat((-x2, x1), dim=-1) * sin[None, :, None, :]
    torch.testing.assert_close(got, want, **tolerance("pattern.rotary.half", torch.float32))


@pytest.mark.slow
def test_pair_tables_are_widened_from_their_current_values(glue):
    """A torchtune-style packed [cos | sin] cache buffer written through ``.data`` between calls."""
    s, d = 16, 8
    angles = torch.arange(s, dtype=torch.float32)[:, None] * torch.rand(d // 2, generator=torch.Generator().manual_seed(0))
    cache = torch.stack([angles.cos(), angles.sin()], dim=-1)  # [S, D/2, 2]
    x = torch.randn(1, s, 2, d)

    def original():
        pairs = x.reshape(*x.shape[:-1], d // 2, 2)
        c, n = cache[None, :, None, :, 0], cache[None, :, None, :, 1]
        return torch.stack([pairs[..., 0] * c - pairs[..., 1] * n, pairs[..., 1] * c + pairs[..., 0] * n], -1).flatten(-2)

    for step in range(3):
        c, n = cache[None, :, None, :, 0], cache[None, :, None, :, 1]
        assert glue.pair_rotary_fits(x, c, n, "interleave")
        torch.testing.assert_close(glue.pair_rotary_mul(x, c, n, "interleave"), original(),
                                   **tolerance("pattern.rotary.half", torch.float32))
        cache.data.mul_(0.5).add_(step)  # values outside [-1, 1] too


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_under_compile_unproven_values_take_the_original_path(glue, backend):
    torch._dynamo.reset()
    q, k, v = qkv()
    mask = causal_additive(5)
    guard = torch.compile(lambda q, k, v, m, proven: glue.can_fuse(q, k, v, additive=m, mask_values_proven=proven,
                                                                   live_rows_proven=proven),
                          fullgraph=True, backend=backend)
    assert not guard(q, k, v, mask, False)
    assert guard(q, k, v, mask, True)
    cos, sin = rope_table(5, 8)
    table = torch.compile(glue.rotary_fits, fullgraph=True, backend=backend)
    assert table(torch.randn(2, 5, 4, 8), cos[None, :, None], sin[None, :, None])  # no value condition
    attention = torch.compile(glue.sdpa, fullgraph=True, backend=backend)
    torch.testing.assert_close(attention(q, k, v, attn_mask=mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    torch._dynamo.reset()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_under_compile_masks_without_value_conditions_fuse(glue, backend):
    """A bool SDPA mask and is_causal need no value check: the compiled graph holds the fused kernel."""
    if not dispatcher_op("npu_fusion_attention"):
        pytest.skip("the emulated npu_fusion_attention is not a torch.ops.npu op yet (kernels branch): "
                    "its Python body is not traceable")
    torch._dynamo.reset()
    q, k, v = qkv()
    attention = torch.compile(glue.sdpa, fullgraph=True, backend=backend)
    for kwargs in (dict(attn_mask=causal_additive(5) == 0), dict(is_causal=True)):
        torch.testing.assert_close(attention(q, k, v, **kwargs), F.scaled_dot_product_attention(q, k, v, **kwargs))
    torch._dynamo.reset()
