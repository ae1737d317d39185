"""npu_glue, the vendored helper, under the emulated NPU: the fused path is taken when exact and
gives SDPA's result; otherwise the original runs."""

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.support import GLUE, qkv, tolerance as table_tolerance

API = "torch.nn.functional.scaled_dot_product_attention"


@pytest.fixture
def calls(spy):
    """The kwargs of each npu_fusion_attention call made through the helper."""
    return spy.kwargs.setdefault("npu_fusion_attention", [])


def tolerance(dtype):
    return table_tolerance(API, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("sq,skv", [(5, 5), (3, 7), (7, 3)])
def test_sdpa_causal_is_top_left(glue, calls, dtype, sq, skv):
    q, k, v = qkv(sq=sq, skv=skv, dtype=dtype)
    got = glue.sdpa(q, k, v, is_causal=True)
    assert calls and calls[0]["sparse_mode"] == 2
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True), **tolerance(dtype))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_bool_mask_is_inverted_and_gqa_native(glue, calls, dtype):
    q, k, v = qkv(nq=4, nkv=2, sq=4, skv=6, dtype=dtype)
    mask = torch.rand(2, 1, 4, 6, generator=torch.Generator().manual_seed(1)) > 0.4
    mask[0, 0, 1] = False  # a fully masked row: SDPA gives 0
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True, scale=0.3)
    got = glue.sdpa(q, k, v, attn_mask=mask, enable_gqa=True, scale=0.3)
    assert len(calls) == 1 and calls[0]["scale"] == 0.3
    torch.testing.assert_close(got, want, **tolerance(dtype))


def repeat_kv(t, groups):
    """Hugging Face's repeat_kv: [B, Nkv, S, D] -> [B, Nkv * groups, S, D], head h reading kv head h // groups."""
    b, n, s, d = t.shape
    return t[:, :, None].expand(b, n, groups, s, d).reshape(b, n * groups, s, d)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gqa_kv_heads_reach_the_kernel_unrepeated(glue, spy, dtype):
    """The helper side of native GQA: can_fuse and npu_mask take K/V with fewer heads, and the kernel
    (head_num = query heads) computes what the eager code computes on repeat_kv copies."""
    q, k, v = qkv(nq=8, nkv=2, sq=5, skv=5, dtype=dtype)
    mask = torch.full((5, 5), float("-inf")).triu(1).to(dtype)[None, None]
    assert glue.can_fuse(q, k, v, additive=mask)
    got = glue.torch_npu.npu_fusion_attention(q, k, v, q.shape[1], "BNSD", atten_mask=glue.npu_mask(q, k, additive=mask),
                                              scale=8 ** -0.5)[0]
    scores = (q @ repeat_kv(k, 4).transpose(-2, -1)) * 8 ** -0.5 + mask
    want = torch.softmax(scores, dim=-1, dtype=torch.float32).to(dtype) @ repeat_kv(v, 4)
    torch.testing.assert_close(got, want, **tolerance(dtype))
    glue.sdpa(q, k, v, attn_mask=mask, enable_gqa=True)
    assert [a[1].shape[1] for a in spy.args["npu_fusion_attention"]] == [2, 2]  # K with 2 heads, as given
    assert not glue.can_fuse(*qkv(nq=6, nkv=4))  # 4 KV heads do not divide 6 query heads


@pytest.mark.slow
def test_sdpa_padding_mask_broadcasts(glue, calls):
    q, k, v = qkv(sq=3, skv=5)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])[:, None, None, :]
    torch.testing.assert_close(glue.sdpa(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, mask), **tolerance(torch.float32))
    assert len(calls) == 1


@pytest.mark.slow
def test_sdpa_additive_mask(glue, calls):
    q, k, v = qkv(sq=4, skv=4)
    mask = torch.zeros(4, 4).masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(1), torch.finfo(torch.float32).min)
    torch.testing.assert_close(glue.sdpa(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, mask), **tolerance(torch.float32))
    assert len(calls) == 1


@pytest.mark.parametrize("case", ["bias", "float64", "3d", "mask_and_causal", "dead_additive_row", "head_dim"])
def test_sdpa_falls_back(glue, calls, case):
    q, k, v = qkv(sq=4, skv=4, d=776 if case == "head_dim" else 8)
    mask = None
    if case == "bias":
        mask = torch.randn(4, 4)  # a real additive bias, not a 0/-inf mask
    elif case == "float64":
        q, k, v = q.double(), k.double(), v.double()
    elif case == "3d":
        q, k, v = q[0], k[0], v[0]
    elif case == "dead_additive_row":
        mask = torch.zeros(4, 4)
        mask[2] = float("-inf")
    kwargs = dict(attn_mask=mask, is_causal=case == "mask_and_causal")
    if case == "mask_and_causal":
        kwargs["attn_mask"] = torch.rand(4, 4, generator=torch.Generator().manual_seed(0)) > 0.3
    torch.testing.assert_close(glue.sdpa(q, k, v, **kwargs), F.scaled_dot_product_attention(q, k, v, **kwargs))
    assert not calls


def test_causal_mask_is_compressed_and_cached(glue):
    mask = glue.causal_mask(torch.device("cpu"))
    assert mask.shape == (2048, 2048) and mask.dtype == torch.bool and mask[0, 1] and not mask[1, 0]
    assert glue.causal_mask(torch.device("cpu")) is mask


def test_can_fuse_checks_masks(glue):
    q, k, v = qkv(sq=3, skv=3)
    minimum = torch.finfo(torch.float32).min
    assert glue.can_fuse(q, k, v, additive=torch.zeros(2, 1, 1, 3))
    assert not glue.can_fuse(q, k, v, additive=torch.full((2, 1, 1, 3), -1.0))  # a bias, not a mask
    assert glue.can_fuse(q, k, v, additive=torch.full((2, 1, 1, 3), minimum))  # every row dead: fixed on the device
    assert not glue.can_fuse(q.half(), k.half(), v.half(), additive=torch.full((2, 1, 1, 3), -65504.0).half())
    assert not glue.can_fuse(q, k, v, additive=torch.zeros(2, 1, 1, 4))  # does not broadcast
    assert glue.can_fuse(q, k, v, causal=torch.ones(1, 1, 3, 3))
    assert not glue.can_fuse(q, k, v, causal=torch.ones(1, 1, 1, 1))  # broadcasts, but is not causal
    assert not glue.can_fuse(q.double(), k.double(), v.double())
    keep = torch.ones(3, 3, dtype=torch.bool).tril()
    masked = glue.npu_mask(q, k, keep=keep, additive=torch.zeros(2, 1, 1, 3))
    assert masked.shape == (2, 1, 3, 3) and torch.equal(masked[0, 0], ~keep)


def test_attention_weights_requested(glue):
    class Config:
        output_attentions = True

    class Module:
        config = Config()

    assert glue.attention_weights_requested(Module(), {})
    assert not glue.attention_weights_requested(Module(), {"output_attentions": False})
    assert not glue.attention_weights_requested(object(), {})
    assert glue.attention_weights_requested(object(), {"output_attentions": True})


def test_imports_only_torch_torch_npu_math():
    import ast

    tree = ast.parse(GLUE.read_text())
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert roots <= {"torch", "torch_npu", "math", "functools", "logging", "os", "sys"}
