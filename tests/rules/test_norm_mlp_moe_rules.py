"""NPU330 (SwiGLU), NPU340 (MoE gating): the migrated code computes what the original computes
under the emulated NPU, in float32 and bfloat16, in inference and training (RMSNorm, NPU320:
``test_rms_norm_rules.py``). Each snippet is migrated with only its rule
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

MLPS = '''
import torch.nn.functional as F
from torch import nn


class LlamaMLP(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.gate_proj = nn.Linear(8, 12, bias=False)
        self.up_proj = nn.Linear(8, 12, bias=False)
        self.down_proj = nn.Linear(12, 8, bias=False)
        self.act_fn = ACTIVATIONS[act]

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class FeedForward(nn.Module):
    def __init__(self, act=None):
        super().__init__()
        self.w1 = nn.Linear(8, 12, bias=False)
        self.w2 = nn.Linear(12, 8, bias=False)
        self.w3 = nn.Linear(8, 12, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class GatedActDense(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.wi_0 = nn.Linear(8, 12, bias=False)
        self.wi_1 = nn.Linear(8, 12, bias=False)
        self.wo = nn.Linear(12, 8, bias=False)
        self.act = ACTIVATIONS[act]

    def forward(self, hidden_states):
        hidden_gelu = self.act(self.wi_0(hidden_states))
        hidden_linear = self.wi_1(hidden_states)
        hidden_states = hidden_gelu * hidden_linear
        return self.wo(hidden_states)


class Expert(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.gate_up_proj = nn.Linear(8, 24, bias=False)
        self.down_proj = nn.Linear(12, 8, bias=False)
        self.act_fn = ACTIVATIONS[act]

    def forward(self, hidden_states):
        gate, up = self.gate_up_proj(hidden_states).chunk(2, dim=-1)
        return self.down_proj(self.act_fn(gate) * up)
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


def _activations():
    from transformers.activations import ACT2FN

    return {"silu": nn.SiLU(), "hf-silu": ACT2FN["silu"], "gelu-tanh": nn.GELU(approximate="tanh"), "swish": ACT2FN["swish"],
            "gelu-new": ACT2FN["gelu_new"]}  # T5 v1.1's dense_act_fn


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


# -- SwiGLU -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mlps(npu):
    migrated = migrate(MLPS, "NPU330")
    assert migrated.count("npu_glue.swiglu(") == 3 and migrated.count("npu_glue.swiglu_halves(") == 1
    activations = _activations()
    return load(MLPS, ACTIVATIONS=activations), load(migrated, ACTIVATIONS=activations)


@pytest.mark.parametrize("name,act", [("LlamaMLP", "silu"), ("LlamaMLP", "hf-silu"), ("LlamaMLP", "swish"),
                                      ("LlamaMLP", "gelu-tanh"), ("FeedForward", None), ("Expert", "silu"),
                                      ("Expert", "gelu-tanh"), ("GatedActDense", "hf-silu"),
                                      ("GatedActDense", "gelu-new")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swiglu_forms_match_the_original(npu, mlps, name, act, dtype):
    before, after = twins(*mlps, name, act, dtype=dtype)
    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(4)).to(dtype)
    with counting(npu, "npu_swiglu") as calls:
        got = after(x)
    want = before(x)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.float(), want.float(), **tolerance("npu_swiglu", dtype))
    assert len(calls) == (0 if act in ("gelu-tanh", "gelu-new") else 1), "fused exactly when the activation is SiLU"


@pytest.mark.parametrize("name", ["LlamaMLP", "GatedActDense", "Expert"])
def test_swiglu_gradients_match(npu, mlps, name):
    before, after = twins(*mlps, name, "silu")
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(5))
    grads = []
    for model in (before, after):
        model(x).square().sum().backward()
        grads.append([p.grad for p in model.parameters()])
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, **tolerance("npu_swiglu", torch.float32))


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
