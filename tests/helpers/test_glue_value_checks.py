"""npu_glue's value conditions (additive mask 0-or-minus-infinity, no fully masked row, rotary
tables in [-1, 1]) cost one device->host sync per distinct tensor, are re-checked after an in-place
change, never keep a tensor alive, are skipped by a rule's proof, and are never evaluated under
torch.compile (the original path runs there unless proven)."""

import gc
import weakref

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.support import counted, dispatcher_op, qkv

MINUS_INF = float("-inf")


def causal_additive(s, value=MINUS_INF):
    return torch.full((s, s), value).triu(1)


def bias(s):
    return torch.randn(s, s, generator=torch.Generator().manual_seed(3))  # not a 0 / -inf mask


def test_one_sync_per_distinct_mask_and_one_conversion(glue):
    q, k, v = qkv()
    mask = causal_additive(5)
    first, ops = counted(glue.can_fuse, q, k, v, additive=mask)
    assert first and ops.counts["sync"] == 1
    for _ in range(3):  # every later layer of the forward pass
        again, ops = counted(lambda: (glue.can_fuse(q, k, v, additive=mask), glue.npu_mask(q, k, additive=mask)))
        assert again[0] and ops.counts["sync"] == 0
        assert ops.ops["le"] == 0  # the conversion to a bool mask was made once, by the first can_fuse
    converted = glue.npu_mask(q, k, additive=mask)
    assert converted.shape == (2, 1, 5, 5) and torch.equal(converted[1, 0], torch.ones(5, 5, dtype=torch.bool).triu(1))


def test_views_of_one_mask_share_its_check(glue):
    q, k, v = qkv(sq=4, skv=4)
    buffer = causal_additive(8)[None, None]
    syncs = sum(counted(glue.can_fuse, q, k, v, additive=buffer[:, :, :4, :4])[1].counts["sync"] for _ in range(3))
    assert syncs == 1  # three slices, each a new tensor object, one check


def test_in_place_change_is_rechecked(glue):
    q, k, v = qkv()
    mask = causal_additive(5)
    assert glue.can_fuse(q, k, v, additive=mask)
    mask.copy_(bias(5))  # the version counter moves on
    fused, ops = counted(glue.can_fuse, q, k, v, additive=mask)
    assert not fused and ops.counts["sync"] == 1
    assert not glue.can_fuse(q, k, v, additive=mask)


def test_fully_masked_row_is_checked_with_the_values_in_one_sync(glue):
    q, k, v = qkv()
    mask = causal_additive(5)
    mask[2] = MINUS_INF
    fused, ops = counted(glue.can_fuse, q, k, v, additive=mask)
    assert not fused and ops.counts["sync"] == 1


def test_cache_keeps_no_tensor_alive_and_drops_freed_ones(glue):
    q, k, v = qkv()
    mask = causal_additive(5)
    assert glue.can_fuse(q, k, v, additive=mask)
    entries = len(glue._checked._entries), len(glue._converted._entries)
    alive = weakref.ref(mask)
    del mask
    gc.collect()
    assert alive() is None
    assert (len(glue._checked._entries), len(glue._converted._entries)) == (entries[0] - 1, entries[1] - 1)


def test_a_new_tensor_at_a_freed_ones_address_is_checked_anew(glue):
    q, k, v = qkv()
    ids, verdicts = [], []
    for i in range(40):  # same-size tensors freed at once: Python and the allocator reuse the slots
        mask = causal_additive(5) if i % 2 else bias(5)
        ids.append(id(mask))
        verdicts.append(glue.can_fuse(q, k, v, additive=mask))
        del mask
    assert len(set(ids)) < len(ids), "no id was reused: the test proves nothing"
    assert verdicts == [bool(i % 2) for i in range(40)]


def test_cache_is_bounded(glue):
    q, k, v = qkv(sq=4, skv=4)
    buffer = causal_additive(200)[None, None]
    for start in range(100):  # 100 distinct live views of one buffer
        glue.can_fuse(q, k, v, additive=buffer[:, :, start:start + 4, start:start + 4])
    assert len(glue._checked._entries) <= glue._checked._size


def test_proofs_skip_the_checks(glue):
    q, k, v = qkv()
    mask = causal_additive(5)
    fused, ops = counted(glue.can_fuse, q, k, v, additive=mask, mask_values_proven=True, live_rows_proven=True)
    assert fused and ops.counts["sync"] == 0
    # a proof is trusted: the rule passes it only where the code that builds the mask proves it
    assert glue.can_fuse(q, k, v, additive=bias(5), mask_values_proven=True, live_rows_proven=True)
    fused, ops = counted(glue.can_fuse, q, k, v, additive=causal_additive(5), mask_values_proven=True)
    assert fused and ops.counts["sync"] == 1  # live rows are still checked


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
        mask.copy_(bias(5))  # no version counter would notice this
        assert not glue.can_fuse(q, k, v, additive=mask)
    assert syncs == [1, 1]


def test_bool_sdpa_mask_needs_no_sync_and_is_inverted_once(glue, spy):
    q, k, v = qkv(sq=4, skv=6)
    keep = torch.rand(2, 1, 4, 6, generator=torch.Generator().manual_seed(1)) > 0.3
    outs, ops = counted(lambda: [glue.sdpa(q, k, v, attn_mask=keep) for _ in range(3)])
    assert spy["npu_fusion_attention"] == 3 and ops.counts["sync"] == 0 and ops.ops["bitwise_not"] == 1
    torch.testing.assert_close(outs[-1], F.scaled_dot_product_attention(q, k, v, attn_mask=keep))


def rope_table(s, d, scale=1.0):
    angles = torch.arange(s, dtype=torch.float32)[:, None] * torch.rand(d // 2, generator=torch.Generator().manual_seed(0))
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos() * scale, angles.sin() * scale


def test_rotary_table_checked_once_across_views(glue):
    cos, sin = rope_table(16, 8)
    x = torch.randn(2, 16, 4, 8)
    fits = []
    for _ in range(4):  # q and k of two layers; each takes a new view of the table
        fit, ops = counted(glue.rotary_fits, x, cos[None, :, None, :], sin[None, :, None, :])
        fits.append((fit, ops.counts["sync"]))
    assert fits == [(True, 1), (True, 0), (True, 0), (True, 0)]
    fit, ops = counted(glue.rotary_fits, x, cos[None, :, None, :], sin[None, :, None, :], table_proven=True)
    assert fit and ops.counts["sync"] == 0
    cos.mul_(2)  # scaled in place: no longer a cos table
    assert not glue.rotary_fits(x, cos[None, :, None, :], sin[None, :, None, :])


def test_scaled_rotary_table_falls_back(glue):
    cos, sin = rope_table(16, 8, scale=1.5)  # e.g. Hugging Face's attention_scaling
    assert not glue.rotary_fits(torch.randn(2, 16, 4, 8), cos[None, :, None, :], sin[None, :, None, :])


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
    table = torch.compile(lambda x, c, s, proven: glue.rotary_fits(x, c, s, table_proven=proven), fullgraph=True, backend=backend)
    x = torch.randn(2, 5, 4, 8)
    assert not table(x, cos[None, :, None], sin[None, :, None], False)
    assert table(x, cos[None, :, None], sin[None, :, None], True)
    attention = torch.compile(glue.sdpa, fullgraph=True, backend=backend)
    torch.testing.assert_close(attention(q, k, v, attn_mask=mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    torch._dynamo.reset()


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
