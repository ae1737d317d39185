"""NPU320 (RMSNorm), NPU340 (MoE gating; SwiGLU: test_swiglu_rules.py): the migrated code computes what the
original computes under the emulated NPU, in float32 and bfloat16, with the weight dtype equal to or
different from the input's, in inference and training. Each snippet is migrated with only its rule
selected, both versions are executed, and the fused kernel is counted to show which path ran."""

import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from torch import nn

from npu_migrate import kernels
from npu_migrate.migrate.engine import build_engine
from npu_migrate.opmap import load_table

HELPERS = Path(__file__).resolve().parents[2] / "migrate" / "helpers"
TABLE = load_table()

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

ROUTER = '''
import torch
import torch.nn.functional as F


def route(router_logits, top_k):
    routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
    routing_weights, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
    return routing_weights, selected_experts


def route_upcast(router_logits, top_k):
    router_probs = torch.nn.functional.softmax(router_logits.float(), dim=-1)
    router_top_value, router_indices = torch.topk(router_probs, top_k, dim=-1)
    router_top_value /= router_top_value.sum(dim=-1, keepdim=True)
    return router_top_value, router_indices


def route_in_dtype(router_logits, top_k):
    probs = router_logits.softmax(dim=-1)
    topk_weight, topk_idx = probs.topk(top_k, dim=-1)
    return topk_weight, topk_idx
'''


def migrate(source: str, code: str) -> str:
    result = build_engine(TABLE, select=[code]).migrate("snippet.py", source.encode())
    assert result.status == "changed", (result.status, result.error, result.findings)
    assert all(f.code == code for f in result.findings), result.findings
    return result.migrated


@pytest.fixture(scope="module")
def npu():
    """The emulated NPU, with the helper module importable as the vendored ``npu_glue``."""
    sys.path.insert(0, str(HELPERS))
    try:
        with kernels.emulate():
            yield sys.modules["torch_npu"]
            sys.modules.pop("npu_glue", None)
    finally:
        sys.path.remove(str(HELPERS))


def load(source: str, **extra) -> dict:
    namespace = dict(extra)
    exec(compile(source, "<snippet>", "exec"), namespace)
    return namespace


@contextmanager
def counting(module, op):
    """Counts calls of ``torch_npu.<op>`` made inside the block."""
    original, calls = getattr(module, op), []

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    setattr(module, op, counted)
    try:
        yield calls
    finally:
        setattr(module, op, original)


def tolerance(op: str, dtype: torch.dtype):
    record = TABLE.get(f"torch_npu.{op}").tolerance[str(dtype).replace("torch.", "")]
    return dict(rtol=record.rtol, atol=record.atol)


def twins(original_ns, migrated_ns, name, *args, dtype=None):
    """The class ``name`` built from both sources with the same weights."""
    torch.manual_seed(0)
    before = original_ns[name](*args)
    after = migrated_ns[name](*args)
    after.load_state_dict(before.state_dict())
    if dtype is not None:
        before, after = before.to(dtype), after.to(dtype)
    return before, after


# -- RMSNorm ------------------------------------------------------------------------------------
NORMS = ["LlamaRMSNorm", "T5LayerNorm", "MetaRMSNorm", "ScaleRMSNorm", "PowNorm", "NoWeightNorm", "FunctionalNorm"]


@pytest.fixture(scope="module")
def norms(npu):
    migrated = migrate(RMS_NORMS, "NPU320")
    assert migrated.count("torch_npu.npu_rms_norm(") == len(NORMS)
    assert migrated.count("torch_npu.npu_gemma_rms_norm(") == 1
    return load(RMS_NORMS), load(migrated)


@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("x_dtype,w_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                             (torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16)])
def test_rms_norm_forms_match_the_original(npu, norms, name, x_dtype, w_dtype):
    before, after = twins(*norms, name, 16, dtype=w_dtype)
    x = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(1)).to(x_dtype)
    with counting(npu, "npu_rms_norm") as calls:
        got = after(x)
    want = before(x)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.float(), want.float(), **tolerance("npu_rms_norm", x_dtype))
    fused = x_dtype == w_dtype or name == "NoWeightNorm"
    assert len(calls) == (1 if fused else 0), "the fast path runs exactly when the dtypes agree"


@pytest.mark.parametrize("name", ["LlamaRMSNorm", "T5LayerNorm", "MetaRMSNorm"])
def test_rms_norm_gradients_match(npu, norms, name):
    before, after = twins(*norms, name, 16)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(2))
    grads = []
    for model in (before, after):
        xi = x.clone().requires_grad_()
        model(xi).square().sum().backward()
        grads.append((xi.grad, model.weight.grad))
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, **tolerance("npu_rms_norm", torch.float32))


def test_rms_norm_one_dimensional_input_falls_back(npu, norms):
    before, after = twins(*norms, "LlamaRMSNorm", 16)
    x = torch.randn(16)
    with counting(npu, "npu_rms_norm") as calls:
        torch.testing.assert_close(after(x), before(x))
    assert not calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemma_norm_is_fused_only_without_autograd(npu, norms, dtype):
    before, after = twins(*norms, "GemmaRMSNorm", 16, dtype=dtype)
    x = torch.randn(2, 16, generator=torch.Generator().manual_seed(3)).to(dtype)
    with counting(npu, "npu_gemma_rms_norm") as calls, torch.no_grad():
        got = after(x)
    assert len(calls) == 1
    torch.testing.assert_close(got.float(), before(x).float(), **tolerance("npu_gemma_rms_norm", dtype))
    with counting(npu, "npu_gemma_rms_norm") as calls:
        after(x.requires_grad_()).sum().backward()  # the kernel has no backward: the original runs
    assert not calls and after.weight.grad is not None


# -- MoE gating ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def routers(npu):
    migrated = migrate(ROUTER, "NPU340")
    assert migrated.count("torch_npu.npu_moe_gating_top_k_softmax(") == 3
    return load(ROUTER), load(migrated)


@pytest.mark.parametrize("name", ["route", "route_upcast", "route_in_dtype"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_router_matches_the_original_in_inference(npu, routers, name, dtype):
    logits = torch.randn(6, 8, generator=torch.Generator().manual_seed(6)).to(dtype)
    with counting(npu, "npu_moe_gating_top_k_softmax") as calls, torch.no_grad():
        weights, experts = routers[1][name](logits, 2)
    want_weights, want_experts = routers[0][name](logits, 2)
    assert len(calls) == 1
    assert weights.dtype == want_weights.dtype and experts.dtype == want_experts.dtype == torch.int64
    assert torch.equal(experts, want_experts)
    torch.testing.assert_close(weights.float(), want_weights.float(),
                               **tolerance("npu_moe_gating_top_k_softmax", dtype))


def test_router_keeps_the_original_when_training(npu, routers):
    logits = torch.randn(6, 8, generator=torch.Generator().manual_seed(7), requires_grad=True)
    with counting(npu, "npu_moe_gating_top_k_softmax") as calls:
        weights, _ = routers[1]["route"](logits, 2)
        weights.sum().backward()
    assert not calls and logits.grad is not None


def test_router_with_three_d_logits_and_dim_one_falls_back(npu, routers):
    logits = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(8))
    with counting(npu, "npu_moe_gating_top_k_softmax") as calls, torch.no_grad():
        got = routers[1]["route"](logits, 2)
    want = routers[0]["route"](logits, 2)
    assert not calls
    assert all(torch.equal(g, w) for g, w in zip(got, want))
