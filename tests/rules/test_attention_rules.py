"""The attention rewrites compute what the original code computes: each rule fixture's input and
its migration run side by side on the emulated NPU (random q/k/v, float32 and bfloat16, GQA,
Sq != Skv, bool and additive masks, no dropout), and the fused kernel must actually be called."""

import sys
from pathlib import Path

import pytest
import torch

from npu_migrate import kernels
from tests import snippets
from tests.full_helper import HELPERS
from tests.tolerances import recorded

ROOT = Path(__file__).parents[2]
FIXTURES = ROOT / "fixtures" / "rules"
DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(scope="module")
def npu():
    """The emulated NPU with the vendored helper importable; yields the fused-call log."""
    with kernels.emulate():
        sys.path.insert(0, str(HELPERS))
        sys.modules.pop("npu_glue", None)
        import torch_npu

        calls = []
        real = torch_npu.npu_fusion_attention

        def spy(*args, **kwargs):
            calls.append(kwargs)
            return real(*args, **kwargs)

        torch_npu.npu_fusion_attention = spy
        try:
            yield calls
        finally:
            torch_npu.npu_fusion_attention = real
            sys.path.remove(str(HELPERS))
            sys.modules.pop("npu_glue", None)


def load(case: str, code: str, spelling: str = "as written"):
    """(original namespace, migrated namespace) of a rule fixture (``spelling``: tests/snippets.py)."""
    source = (FIXTURES / case / "input.py").read_text()
    migrated = snippets.migrate(source, "input.py", select=[code], status="changed", spelling=spelling).migrated
    spaces = []
    for text in (source, migrated):
        namespace = {"__name__": f"fixture_{case}"}
        exec(compile(text, case, "exec"), namespace)
        spaces.append(namespace)
    return spaces


def close(got, want, dtype, api="torch.nn.functional.scaled_dot_product_attention"):
    torch.testing.assert_close(got, want, **recorded(api, dtype))


def rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def additive_mask(b, sq, skv, dtype, pad=1):
    """HF-style: causal (bottom-right) plus right padding of the last batch row, dtype-min where masked."""
    keep = torch.ones(sq, skv, dtype=torch.bool).tril(skv - sq).expand(b, 1, sq, skv).clone()
    keep[-1, :, :, skv - pad:] = False
    return torch.zeros(b, 1, sq, skv, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sq,skv", [(6, 6), (3, 6)])
def test_sdpa_rewrite_is_equal(npu, dtype, sq, skv):
    before, after = load("NPU301_sdpa", "NPU301")
    q, k, v = rand(2, 4, sq, 8, dtype=dtype), rand(2, 4, skv, 8, dtype=dtype, seed=1), rand(2, 4, skv, 8, dtype=dtype, seed=2)
    mask = torch.rand(2, 1, sq, skv, generator=torch.Generator().manual_seed(3)) > 0.3
    npu.clear()
    got = after["attend"](q, k, v, mask, False, 0.1)
    assert len(npu) == 2 and {c["sparse_mode"] for c in npu} == {0, 2}
    close(got, before["attend"](q, k, v, mask, False, 0.1), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sdpa_aliased_gqa_is_equal(npu, dtype):
    before, after = load("NPU301_sdpa_aliased", "NPU301")
    q, k, v = rand(1, 4, 5, 8, dtype=dtype), rand(1, 2, 5, 8, dtype=dtype, seed=1), rand(1, 2, 5, 8, dtype=dtype, seed=2)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    npu.clear()
    close(after["grouped"](q, k, v, mask), before["grouped"](q, k, v, mask), dtype)
    close(after["scaled"](q, q, q), before["scaled"](q, q, q), dtype)
    assert len(npu) == 2 and npu[1]["scale"] == 0.125


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_causal_buffer_attention_is_equal(npu, dtype):
    before, after = load("NPU302_eager_causal_buffer", "NPU302")
    torch.manual_seed(0)
    original = before["CausalSelfAttention"](32, 4, 16, 0.1).eval().to(dtype)
    migrated = after["CausalSelfAttention"](32, 4, 16, 0.1).eval().to(dtype)
    migrated.load_state_dict(original.state_dict())
    x = rand(2, 7, 32, dtype=dtype)
    npu.clear()
    got = migrated(x)
    # the buffer's current values are the kernel's mask, never the causal sparse mode it was built for
    assert len(npu) == 1 and npu[0].get("sparse_mode", 0) == 0
    assert torch.equal(npu[0]["atten_mask"][0, 0], ~torch.ones(7, 7, dtype=torch.bool).tril())
    close(got, original(x), dtype)
    for model in (original, migrated):  # a prefix-LM fills its buffer after __init__
        model.bias.fill_(1)
    close(migrated(x), original(x), dtype)
    assert len(npu) == 2 and not npu[1]["atten_mask"].any()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("padded", [False, True])
def test_gptj_attention_is_equal(npu, dtype, padded):
    before, after = load("NPU302_eager_causal_buffer", "NPU302")
    original, migrated = before["GPTJAttention"](16, 8), after["GPTJAttention"](16, 8)
    q, k, v = rand(2, 4, 3, 8, dtype=dtype), rand(2, 4, 6, 8, dtype=dtype, seed=1), rand(2, 4, 6, 8, dtype=dtype, seed=2)
    mask = None
    if padded:  # padding on the left of the key axis for the first row
        mask = torch.zeros(2, 1, 1, 6, dtype=torch.float32)
        mask[0, ..., :2] = torch.finfo(torch.float32).min
    npu.clear()
    got = migrated(q, k, v, mask)
    assert len(npu) == 1 and got.dtype == dtype
    close(got, original(q, k, v, mask), dtype)


class _Module(torch.nn.Module):
    def __init__(self, groups):
        super().__init__()
        self.num_key_value_groups = groups


@pytest.mark.slow
@pytest.mark.parametrize("dtype,spelling", [(torch.float32, "as written"), (torch.bfloat16, "as written"),
                                            (torch.float32, "low precedence")])
@pytest.mark.parametrize("sq,skv", [(5, 5), (2, 5)])
def test_hf_eager_attention_forward_is_equal(npu, dtype, spelling, sq, skv):
    before, after = load("NPU302_eager_hf_gqa", "NPU302", spelling)
    module = _Module(groups=2).eval()
    q, k, v = rand(2, 4, sq, 8, dtype=dtype), rand(2, 2, skv, 8, dtype=dtype, seed=1), rand(2, 2, skv, 8, dtype=dtype, seed=2)
    mask = additive_mask(2, sq, skv + 2, dtype)  # longer than the keys: sliced by the code
    npu.clear()
    out, weights = after["eager_attention_forward"](module, q, k, v, mask, 8 ** -0.5)
    assert len(npu) == 1 and weights is None
    want, _ = before["eager_attention_forward"](module, q, k, v, mask, 8 ** -0.5)
    close(out, want, dtype)
    # asked for the probabilities: the original code runs and returns them
    npu.clear()
    out, weights = after["eager_attention_forward"](module, q, k, v, mask, 8 ** -0.5, output_attentions=True)
    assert not npu and weights is not None
    torch.testing.assert_close(out, want)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_bert_attention_is_equal_and_keeps_probabilities(npu, dtype):
    before, after = load("NPU302_eager_hf_gqa", "NPU302")
    original, migrated = before["BertSelfAttention"](32, 4, 0.1).eval(), after["BertSelfAttention"](32, 4, 0.1).eval()
    q, k, v = (rand(2, 4, 5, 8, dtype=dtype, seed=s) for s in range(3))
    mask = torch.zeros(2, 1, 1, 5, dtype=dtype)
    mask[1, ..., 3:] = torch.finfo(dtype).min
    npu.clear()
    (got,) = migrated(q, k, v, mask)
    assert len(npu) == 1
    close(got, original(q, k, v, mask)[0], dtype)
    npu.clear()
    got, probs = migrated(q, k, v, mask, output_attentions=True)
    assert not npu and probs is not None
    head_mask = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=dtype).view(1, 4, 1, 1)
    (got,) = migrated(q, k, v, mask, head_mask=head_mask)
    assert not npu
    torch.testing.assert_close(got, original(q, k, v, mask, head_mask=head_mask)[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_aliased_masked_fill_attention_is_equal(npu, dtype):
    before, after = load("NPU302_eager_aliased", "NPU302")
    q, k, v = rand(2, 2, 4, 8, dtype=dtype), rand(2, 2, 6, 8, dtype=dtype, seed=1), rand(2, 2, 6, 8, dtype=dtype, seed=2)
    mask = torch.rand(4, 6, generator=torch.Generator().manual_seed(4)) > 0.6
    mask[:, 0] = False  # no fully masked row (those stay on the original path)
    npu.clear()
    got = after["attend"](q, k, v, mask, 0.0, False)
    assert len(npu) == 1
    close(got, before["attend"](q, k, v, mask, 0.0, False), dtype)
    mask[1] = True  # a fully masked row: the eager softmax gives NaN there, so the original runs
    npu.clear()
    torch.testing.assert_close(after["attend"](q, k, v, mask, 0.0, False), before["attend"](q, k, v, mask, 0.0, False),
                               equal_nan=True)
    assert not npu


@pytest.mark.slow
@pytest.mark.parametrize("dtype,spelling", [(torch.float32, "as written"), (torch.bfloat16, "as written"),
                                            (torch.float32, "low precedence")])
def test_every_catalogue_spelling_is_fused_and_equal(npu, dtype, spelling):
    """Inductor's chained, permuted and einsum spellings, an expand_as mask and a vision-transformer
    attention whose output feeds a larger expression: all fused, all equal to the original (also
    with every pasted operand ``x if True else x``)."""
    before, after = load("NPU302_eager_spellings", "NPU302", spelling)
    q, k, v = (rand(2, 4, 5, 8, dtype=dtype, seed=s) for s in range(3))
    for name, args in (("chained", (q, k, v, 8 ** 0.5)), ("permuted", (q, k, v)), ("einsum_heads", (q, k, v))):
        npu.clear()
        close(after[name](*args), before[name](*args), dtype)
        assert len(npu) == 1, name
    mask = torch.rand(1, 1, 5, 5, generator=torch.Generator().manual_seed(5)) > 0.7
    mask[..., 0] = False  # every row keeps a key
    npu.clear()
    close(after["expanded_mask"](q, k, v, mask), before["expanded_mask"](q, k, v, mask), dtype)
    assert len(npu) == 1
    torch.manual_seed(0)
    original = before["VisionAttention"](32, 4).eval().to(dtype)
    migrated = after["VisionAttention"](32, 4).eval().to(dtype)
    migrated.load_state_dict(original.state_dict())
    x = rand(2, 5, 32, dtype=dtype)
    npu.clear()
    close(migrated(x), original(x), dtype)
    assert len(npu) == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_scaled_query_lands_parenthesised_and_is_equal(npu, dtype):
    """The issue's ``torch.matmul(q / math.sqrt(d), ...)``: the scaled query is the kernel's query,
    and ``(q / math.sqrt(d)).shape[1]`` its head count (pasted bare, it divided by a shape and raised
    AttributeError on every call after the guard had passed); the value cast likewise."""
    before, after = load("NPU302_eager_scaled_query", "NPU302")
    q, k, v = (rand(2, 4, 5, 8, dtype=dtype, seed=s) for s in range(3))
    npu.clear()
    close(after["scaled_query"](q, k, v, 8), before["scaled_query"](q, k, v, 8), dtype)
    assert len(npu) == 1
    mask = additive_mask(2, 5, 5, torch.float32)
    npu.clear()
    got = after["upcast_scores"](q, k, v, 8, mask)
    want = before["upcast_scores"](q, k, v, 8, mask)
    assert len(npu) == 1 and got.dtype == want.dtype
    close(got, want, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_merged_heads_and_one_head_attention_run_fused_and_equal(npu, dtype):
    """3-D q/k/v with the heads merged into the batch ([B*H, N, D], einops or view, with a [B*H, N, N]
    additive mask) and 2-D one-head q/k/v: the guard was never true for them when they were passed
    as BNSD; as [B*H, 1, N, D] / [1, 1, N, D] views the kernel runs and the result is the original's."""
    before, after = load("NPU302_eager_merged_heads", "NPU302")
    b, h, n, d = 2, 3, 5, 8
    x = rand(b, n, h * d, dtype=dtype)
    weights = [rand(h * d, h * d, dtype=dtype, seed=s) / 5 for s in (1, 2, 3)]
    npu.clear()
    close(after["merged_heads"](x, *weights, h), before["merged_heads"](x, *weights, h), dtype)
    assert len(npu) == 1
    q, k, v = (rand(b, h, n, d, dtype=dtype, seed=s) for s in (4, 5, 6))
    padding = additive_mask(b * h, n, n, dtype).reshape(b, h, n, n)
    npu.clear()
    got = after["merged_heads_masked"](q, k, v, padding, b, h, n, d)
    close(got, before["merged_heads_masked"](q, k, v, padding, b, h, n, d), dtype)
    assert len(npu) == 1 and got.shape == (b * h, n, d)
    x1 = rand(n, h * d, dtype=dtype, seed=7)
    npu.clear()
    got = after["one_head"](x1, *weights, h * d)
    close(got, before["one_head"](x1, *weights, h * d), dtype)
    assert len(npu) == 1 and got.shape == (n, h * d)


def _twins(before, after, name, *args):
    """The fixture's class ``name`` from the original and the migrated source, with the same weights."""
    torch.manual_seed(0)
    original = before[name](*args)
    migrated = after[name](*args)
    migrated.load_state_dict(original.state_dict())
    return original, migrated


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_module_attention_is_equal_forward_and_backward(npu, dtype):
    """``self.attend = nn.Softmax(dim=-1)`` (alone, or with dropout in an nn.Sequential) and
    ``nn.Softmax(dim=-1)(scores)``: fused, and equal to the original with its gradients."""
    before, after = load("NPU302_softmax_module", "NPU302")
    for name in ("Attention", "SequentialAttention"):
        original, migrated = _twins(before, after, name, 8)
        original.to(dtype), migrated.to(dtype)
        x = rand(2, 5, 8, dtype=dtype)
        npu.clear()
        got = migrated(x.clone().requires_grad_())
        assert len(npu) == 1, name
        want = original(x.clone().requires_grad_())
        close(got, want, dtype)
        got.float().sum().backward(), want.float().sum().backward()
        for (param, a), b in zip(migrated.named_parameters(), original.parameters()):
            close(a.grad, b.grad, dtype)
    q, k, v = rand(2, 2, 4, 8, dtype=dtype), rand(2, 2, 6, 8, dtype=dtype, seed=1), rand(2, 2, 6, 8, dtype=dtype, seed=2)
    npu.clear()
    close(after["attend"](q, k, v, 0.125), before["attend"](q, k, v, 0.125), dtype)
    assert len(npu) == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_probabilities_zeroed_after_the_softmax_are_fused_with_their_dead_rows_zero(npu, dtype):
    """``attn.masked_fill(~mask, 0)`` after the masked softmax: a batch row whose keys are all padding
    gives zeros, fused where no gradient is needed; with a gradient such a call runs the original,
    and a call with no dead row runs fused, forward and backward."""
    before, after = load("NPU302_zeroed_rows", "NPU302")
    q, k, v = rand(2, 2, 4, 8, dtype=dtype), rand(2, 2, 6, 8, dtype=dtype, seed=1), rand(2, 2, 6, 8, dtype=dtype, seed=2)
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[0, ..., 4:] = False
    mask[1] = False  # every key of the second sequence is padding
    npu.clear()
    with torch.no_grad():
        got, want = after["attend"](q, k, v, mask, 0.125), before["attend"](q, k, v, mask, 0.125)
    assert len(npu) == 1 and not got.isnan().any() and (got[1] == 0).all()
    close(got, want, dtype)
    npu.clear()
    leaf = q.clone().requires_grad_()
    torch.testing.assert_close(after["attend"](leaf, k, v, mask, 0.125), want, equal_nan=True)
    assert not npu  # a dead row and a gradient needed: the original runs
    mask[1, ..., :2] = True
    grads = []
    for namespace in (after, before):
        leaf = q.clone().requires_grad_()
        out = namespace["attend"](leaf, k, v, mask, 0.125)
        out.float().sum().backward()
        grads.append((out, leaf.grad))
    assert len(npu) == 1
    close(grads[0][0], grads[1][0], dtype)
    close(grads[0][1], grads[1][1], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_minus_inf_buffer_named_bias_is_a_mask_fused_and_checked(npu, dtype):
    """``self.attn_bias``, built as triu(full(-inf)): fused while it holds 0 / -inf; after a write
    that makes it a real bias the original runs."""
    before, after = load("NPU302_minus_inf_buffer", "NPU302")
    original, migrated = (m.to(dtype) for m in _twins(before, after, "CausalSelfAttention", 6))
    q, k, v = (rand(2, 2, 6, 8, dtype=dtype, seed=s) for s in range(3))
    npu.clear()
    close(migrated(q, k, v), original(q, k, v), dtype)
    assert len(npu) == 1
    for module in (original, migrated):
        module.attn_bias.add_(torch.linspace(-1, 0, 6))  # now a bias: no kernel computes it exactly as a mask
    npu.clear()
    close(migrated(q, k, v), original(q, k, v), dtype)
    assert not npu
