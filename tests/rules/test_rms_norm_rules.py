"""NPU320 (RMSNorm): the migrated code computes what the original computes under the emulated NPU,
in float32 and bfloat16, with the weight dtype equal to or different from the input's (float32
weights with bfloat16 activations, as under autocast: the kernel's mixed precision), in inference
and training. Each snippet is migrated with only NPU320 selected, both versions are executed, and
the fused kernel is counted to show which path ran.
The emulated npu_rms_norm takes a float32 gamma with float16/bfloat16 x as torch_npu documents
(facts §2.5, torch_npu's test_rms_norm_mix_dtype: the float32 computation rounded once to x's dtype).
"""

import re

import pytest
import torch
import torch.nn.functional as F

from tests import snippets
from tests.rules.emulated import counting, emulated_npu, load, tolerance, twins
BF16, F32 = torch.bfloat16, torch.float32

RMS_NORMS = '''
import torch
import torch.nn.functional as F
from torch import nn


class LlamaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class T5LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


class MetaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


class ScaleRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        orig_dtype = x.dtype
        x = x.float()
        inv_rms = torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)
        return (x * inv_rms).to(orig_dtype) * self.scale


class PowNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return x * (x.square().mean(dim=-1, keepdim=True) + 1e-6).pow(-0.5) * self.weight


class NoWeightNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))  # unused: the norm has no weight

    def forward(self, x):
        return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-6)


class FunctionalNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.shape = (dim,)

    def forward(self, x):
        return F.rms_norm(x, self.shape, self.weight)


class LitRMSNorm(nn.Module):
    def __init__(self, size, dim=-1, eps=1e-6, add_unit_offset=False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(size) * 0.1)
        self.eps = eps
        self.dim = dim
        self.add_unit_offset = add_unit_offset

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        norm_x = torch.mean(x * x, dim=self.dim, keepdim=True)
        x_normed = x * torch.rsqrt(norm_x + self.eps)
        weight = (1 + self.weight) if self.add_unit_offset else self.weight
        return (x_normed * weight.float()).to(dtype=dtype)


class TuneRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.normalized_shape = (dim,)
        self.eps = eps
        self.scale = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return F.rms_norm(x.float(), normalized_shape=self.normalized_shape, weight=self.scale, eps=self.eps).to(x.dtype)


class ModuleNorm(nn.Module):
    def __init__(self, dim, eps=None, affine=True):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=eps, elementwise_affine=affine)
        with torch.no_grad():
            if affine:
                self.norm.weight.normal_()

    def forward(self, x):
        return self.norm(x)


class ImageGPTNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, tensor):
        tensor = tensor / torch.sqrt(torch.mean(torch.square(tensor), axis=-1, keepdim=True) + self.eps)
        tensor = tensor * self.weight
        return tensor


class GemmaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(dim) * 0.1)

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)
'''

NORMS = ["LlamaRMSNorm", "T5LayerNorm", "MetaRMSNorm", "ScaleRMSNorm", "PowNorm", "NoWeightNorm", "FunctionalNorm",
         "LitRMSNorm", "TuneRMSNorm", "ModuleNorm", "ImageGPTNorm"]
EQUAL_DTYPES_ONLY = {"T5LayerNorm"}  # its result dtype depends on a branch over the weight's dtype
NO_WEIGHT = {"NoWeightNorm"}


def migrate(source: str, spelling: str = "as written") -> str:
    return snippets.migrated(source, select=["NPU320"], spelling=spelling)


@pytest.fixture(scope="module")
def npu():
    with emulated_npu() as torch_npu:
        yield torch_npu


@pytest.fixture(scope="module")
def norms(npu):
    migrated = migrate(RMS_NORMS)
    assert re.search(r"npu_glue\.RMSNorm\.at\(site=\"[^\"]+:NPU320\"\)\(dim", migrated) and "nn.RMSNorm(" not in migrated
    return load(RMS_NORMS), load(migrated)


@pytest.fixture(scope="module")
def norms_low(npu):
    """The norms migrated with every pasted operand ``x if True else x`` (tests/rules/emulated.py)."""
    return load(RMS_NORMS), load(migrate(RMS_NORMS, "low precedence"))


def sample(*shape, dtype=F32, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.slow
@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("x_dtype,w_dtype,spelling", [
    (F32, F32, "as written"), (BF16, BF16, "as written"), (BF16, F32, "as written"), (F32, BF16, "as written"),
    (F32, F32, "low precedence"), (BF16, F32, "low precedence")],
    ids=["f32", "bf16", "bf16-x-f32-weight", "f32-x-bf16-weight", "f32-low-precedence", "mixed-low-precedence"])
def test_rms_norm_forms_match_the_original(npu, norms, norms_low, name, x_dtype, w_dtype, spelling):
    before, after = twins(*(norms if spelling == "as written" else norms_low), name, 16, dtype=w_dtype)
    x = sample(2, 3, 16, dtype=x_dtype)
    with counting(npu, "npu_rms_norm") as calls:
        got = after(x)
    want = before(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.float(), want.float(), **tolerance("npu_rms_norm", x_dtype))
    mixed = x_dtype == BF16 and w_dtype == F32 and name not in EQUAL_DTYPES_ONLY  # the kernel's mixed precision
    fused = x_dtype == w_dtype or mixed or name in NO_WEIGHT
    assert sum(calls.values()) == (1 if fused else 0), "the fast path runs exactly where the kernel computes the same"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["LlamaRMSNorm", "T5LayerNorm", "MetaRMSNorm", "LitRMSNorm", "TuneRMSNorm",
                                  "ModuleNorm"])
def test_rms_norm_gradients_match(npu, norms, name):
    before, after = twins(*norms, name, 16)
    x = sample(4, 16, seed=2)
    grads = []
    for model in (before, after):
        xi = x.clone().requires_grad_()
        model(xi).square().sum().backward()
        weight = next(p for p in model.parameters())
        grads.append((xi.grad, weight.grad))
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, **tolerance("npu_rms_norm", F32))


def test_mixed_precision_training_step_matches(npu, norms):
    """bfloat16 activations with a float32 weight (AMP): fused, the result and the weight's
    gradient in the original's dtypes."""
    before, after = twins(*norms, "LlamaRMSNorm", 16)
    x = sample(4, 16, dtype=BF16, seed=3)
    results = []
    with counting(npu, "npu_rms_norm") as calls:
        for model in (before, after):
            out = model(x)
            out.float().square().sum().backward()
            results.append((out, model.weight.grad))
    assert sum(calls.values()) == 1
    (want, want_grad), (got, got_grad) = results
    assert got.dtype == want.dtype == F32 and got_grad.dtype == want_grad.dtype == F32
    torch.testing.assert_close(got, want, **tolerance("npu_rms_norm", BF16))
    torch.testing.assert_close(got_grad, want_grad, rtol=2e-2, atol=2e-2)  # bfloat16 input: see the kernel tolerance


@pytest.mark.parametrize("offset", [False, True])
def test_litgpt_unit_offset_and_dim_attribute(npu, norms, offset):
    before, after = twins(*norms, "LitRMSNorm", 16, add_unit_offset=offset)
    x = sample(2, 3, 16, seed=4)
    with counting(npu, "npu_rms_norm") as calls:
        torch.testing.assert_close(after(x), before(x), **tolerance("npu_rms_norm", F32))
    assert sum(calls.values()) == 1
    before, after = twins(*norms, "LitRMSNorm", 3, dim=1)  # normalised over another dim: the guard says no
    x = sample(2, 3, 3, seed=5)
    with counting(npu, "npu_rms_norm") as calls:
        assert torch.equal(after(x), before(x))
    assert not sum(calls.values())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_default_eps_is_float32_epsilon_as_torch_computes_it(npu, norms, dtype):
    """torch 2.13 documents eps=None as torch.finfo(x.dtype).eps, but computes float16/bfloat16 in
    float32 with float32's epsilon; the migrated default matches what torch computes, on inputs small
    enough for eps to decide the result."""
    x = (torch.full((2, 8), 1e-3) * torch.linspace(0.5, 1.5, 8)).to(dtype)
    float32_eps = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + torch.finfo(F32).eps)).to(dtype)
    assert torch.equal(F.rms_norm(x, (8,)), float32_eps)
    if dtype != F32:
        own_eps = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + torch.finfo(dtype).eps)).to(dtype)
        assert not torch.allclose(F.rms_norm(x, (8,)).float(), own_eps.float(), rtol=0.1)
    before, after = twins(*norms, "ModuleNorm", 8, dtype=dtype)
    with counting(npu, "npu_rms_norm") as calls:
        torch.testing.assert_close(after(x), before(x), **tolerance("npu_rms_norm", dtype))
    assert sum(calls.values()) == 1


def test_module_norm_keeps_its_class_and_state(npu, norms):
    before, after = twins(*norms, "ModuleNorm", 16, eps=1e-5, affine=False)
    assert isinstance(after.norm, torch.nn.RMSNorm) and type(after.norm).__name__ == "RMSNorm"
    assert after.norm.weight is None and list(after.state_dict()) == list(before.state_dict())
    x = sample(2, 16, seed=6)
    with counting(npu, "npu_rms_norm") as calls:
        torch.testing.assert_close(after(x), before(x), **tolerance("npu_rms_norm", F32))
    assert sum(calls.values()) == 1


def test_rms_norm_one_dimensional_input_falls_back(npu, norms):
    before, after = twins(*norms, "LlamaRMSNorm", 16)
    x = torch.randn(16)
    with counting(npu, "npu_rms_norm") as calls:
        torch.testing.assert_close(after(x), before(x))
    assert not sum(calls.values())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemma_norm_runs_npu_rms_norm_with_one_plus_w_in_training_too(npu, norms, dtype):
    """npu_gemma_rms_norm has no backward on an NPU; npu_rms_norm with 1 + w (float32, as the
    original computes the factor) has one: inference and training fuse, gradients as the original's."""
    before, after = twins(*norms, "GemmaRMSNorm", 16, dtype=dtype)
    x = sample(2, 16, dtype=dtype, seed=3)
    with counting(npu, "npu_rms_norm", "npu_gemma_rms_norm") as calls, torch.no_grad():
        got = after(x)
    assert calls == {"npu_rms_norm": 1, "npu_gemma_rms_norm": 0}
    torch.testing.assert_close(got.float(), before(x).float(), **tolerance("npu_gemma_rms_norm", dtype))
    grads = []
    for model in (before, after):
        inputs = x.clone().requires_grad_()
        with counting(npu, "npu_rms_norm") as calls:
            model(inputs).float().square().sum().backward()
        grads.append((inputs.grad, model.weight.grad, dict(calls)))
    assert grads[1][2] == {"npu_rms_norm": 1}
    for want, got in zip(grads[0][:2], grads[1][:2]):
        torch.testing.assert_close(got.float(), want.float(), **tolerance("npu_gemma_rms_norm", dtype))


GATED = '''
import torch
import torch.nn.functional as F
from torch import nn


class RMSNormGated(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.variance_epsilon = eps

    def forward(self, hidden_states, gate):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        hidden_states = self.weight * hidden_states.to(input_dtype)
        hidden_states = hidden_states * F.silu(gate.to(torch.float32))
        return hidden_states.to(input_dtype)


class UnweightedRMSNorm(nn.Module):
    def forward(self, x):
        return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + 1e-6).to(x.dtype)
'''


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_norm_before_a_gate_and_an_unweighted_norm(npu, dtype):
    """The norm of a gated norm is fused (the binding of input_dtype, read afterwards, runs before
    the guard); DeepSeek's unweighted norm rounds the inverse RMS to x's dtype first."""
    original, migrated = load(GATED), load(migrate(GATED))
    before, after = twins(original, migrated, "RMSNormGated", 16, dtype=dtype)
    x, gate = sample(2, 3, 16, dtype=dtype, seed=9), sample(2, 3, 16, dtype=dtype, seed=10)
    with counting(npu, "npu_rms_norm") as calls:
        got, unweighted = after(x, gate), migrated["UnweightedRMSNorm"]()(x)
    want, unweighted_want = before(x, gate), original["UnweightedRMSNorm"]()(x)
    assert sum(calls.values()) == 2 and got.dtype == want.dtype and unweighted.dtype == unweighted_want.dtype
    torch.testing.assert_close(got.float(), want.float(), **tolerance("npu_rms_norm", dtype))
    torch.testing.assert_close(unweighted.float(), unweighted_want.float(), **tolerance("npu_rms_norm", dtype))


INLINE = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, gate):
        h = self.proj(x)
        variance = h.float().pow(2).mean(-1, keepdim=True)
        normed = (h.float() * torch.rsqrt(variance + 1e-6)).type_as(h)
        return normed * torch.sigmoid(gate) + x
'''


def test_inline_norm_in_a_larger_function(npu):
    """The statements of a norm inside a block move into the fallback; the rest stays."""
    migrated = migrate(INLINE)
    fused, fallback = migrated.split("else:")
    assert "torch_npu.npu_rms_norm(h," in fused and "variance = " in fallback and "self.proj(x)" not in fallback
    torch.manual_seed(0)
    before = load(INLINE)["Block"](16)
    after = load(migrated)["Block"](16)
    after.load_state_dict(before.state_dict())
    x, gate = sample(2, 16, seed=7), sample(2, 16, seed=8)
    with counting(npu, "npu_rms_norm") as calls:
        torch.testing.assert_close(after(x, gate), before(x, gate), **tolerance("npu_rms_norm", F32))
    assert sum(calls.values()) == 1
