"""NPU330: every gated-MLP form the rule rewrites computes what the original computes on the emulated
NPU, in float32 and bfloat16, in inference and training, with the fused kernel running exactly when
the activation is one it has (SiLU: npu_swiglu, GELU: npu_geglu) and the original code otherwise."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests import snippets
from tests.rules.emulated import counting, emulated_npu, load, tolerance, twins

MLPS = '''
import torch
import torch.nn.functional as F
from torch import nn

H, I = 8, 12


class LlamaMLP(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)
        self.act_fn = ACTIVATIONS[act]

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LitLLaMAMLP(nn.Module):
    def __init__(self, act=None):
        super().__init__()
        self.fc_1 = nn.Linear(H, I, bias=True)
        self.fc_2 = nn.Linear(H, I, bias=True)
        self.proj = nn.Linear(I, H, bias=True)

    def forward(self, x):
        x_fc_1 = self.fc_1(x)
        x_fc_2 = self.fc_2(x)
        x = F.silu(x_fc_1) * x_fc_2
        return self.proj(x)


class GatedActDense(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.wi_0 = nn.Linear(H, I, bias=False)
        self.wi_1 = nn.Linear(H, I, bias=False)
        self.wo = nn.Linear(I, H, bias=False)
        self.act = ACTIVATIONS[act]

    def forward(self, hidden_states):
        hidden_linear = self.wi_1(hidden_states)
        hidden_gelu = self.act(self.wi_0(hidden_states))
        hidden_states = hidden_linear * hidden_gelu
        return self.wo(hidden_states)


class FeedForward(nn.Module):
    def __init__(self, act, up=True):
        super().__init__()
        self.w1 = nn.Linear(H, I, bias=False)
        self.w2 = nn.Linear(I, H, bias=False)
        self.w3 = nn.Linear(H, I, bias=False) if up else None
        self.activation = ACTIVATIONS[act]

    def forward(self, x):
        h = self.activation(self.w1(x))
        if self.w3 is not None:
            h = h * self.w3(x)
        h = self.w2(h)
        return h


class Expert(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.gate_up_proj = nn.Linear(H, 2 * I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)
        self.act_fn = ACTIVATIONS[act]

    def forward(self, hidden_states):
        gate, up = self.gate_up_proj(hidden_states).chunk(2, dim=-1)
        return self.down_proj(self.act_fn(gate) * up)


class GeGLU(nn.Module):
    def __init__(self, act="tanh"):
        super().__init__()
        self.gate = nn.Linear(H, I, bias=False)
        self.up = nn.Linear(H, I, bias=False)
        self.down = nn.Linear(I, H, bias=False)
        self.approximate = act

    def forward(self, x):
        return self.down(F.gelu(self.gate(x), approximate=self.approximate) * self.up(x))


class GeGLUHalves(nn.Module):
    def __init__(self, act=None):
        super().__init__()
        self.gate_up = nn.Linear(H, 2 * I, bias=False)
        self.down = nn.Linear(I, H, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.gelu(gate) * up)


class Experts(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.randn(3, 2 * I, H) / H)
        self.down_proj = nn.Parameter(torch.randn(3, H, I) / I)
        self.act_fn = ACTIVATIONS[act]

    def forward(self, hidden_states, index):
        out = torch.zeros_like(hidden_states)
        for expert_idx in range(3):
            token_idx = torch.where(index == expert_idx)[0]
            gate, up = F.linear(hidden_states[token_idx], self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
            current = self.act_fn(gate) * up
            out.index_add_(0, token_idx, F.linear(current, self.down_proj[expert_idx]))
        return out


class EinsumExperts(nn.Module):
    def __init__(self, act=None):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(3, H, I) / H)
        self.w3 = nn.Parameter(torch.randn(3, H, I) / H)
        self.w2 = nn.Parameter(torch.randn(3, I, H) / I)

    def forward(self, x):
        gate = torch.einsum("ecd,edf->ecf", x, self.w1)
        up = torch.einsum("ecd,edf->ecf", x, self.w3)
        return torch.einsum("ecf,efd->ecd", F.silu(gate) * up, self.w2)


class TokensEinsum(nn.Module):
    def __init__(self, act=None):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(I, H) / H)
        self.w3 = nn.Parameter(torch.randn(I, H) / H)

    def forward(self, x):
        return F.silu(torch.einsum("btd,fd->btf", x, self.w1)) * torch.einsum("btd,fd->btf", x, self.w3)


class Phi3MLP(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.gate_up_proj = nn.Linear(H, 2 * I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)
        self.activation_fn = ACTIVATIONS[act]

    def forward(self, hidden_states):
        up_states = self.gate_up_proj(hidden_states)
        gate, up_states = up_states.chunk(2, dim=-1)
        up_states = up_states * self.activation_fn(gate)
        return self.down_proj(up_states)


class CpmAntDenseGatedACT(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.w_0 = nn.Linear(H, I, bias=False)
        self.w_1 = nn.Linear(H, I, bias=False)
        self.act = ACTIVATIONS[act]

    def forward(self, hidden_states):
        gate_score = self.act(self.w_0(hidden_states))
        hidden_states = self.w_1(hidden_states)
        hidden_states = gate_score * hidden_states
        return hidden_states


class BmmExperts(nn.Module):
    def __init__(self, act=None):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(3, H, I) / H)
        self.w3 = nn.Parameter(torch.randn(3, H, I) / H)

    def forward(self, x):
        return torch.bmm(x, self.w3) * F.silu(torch.bmm(x, self.w1))
'''

EMITTED = {"glu_linear(": 4, "swiglu_linear(": 1, "geglu_linear(": 1, "glu_halves(": 3, "geglu_halves(": 1,
           "swiglu_stacked(": 3}


def _activations():
    from transformers.activations import ACT2FN

    return {"silu": nn.SiLU(), "hf-silu": ACT2FN["silu"], "swish": ACT2FN["swish"], "gelu": ACT2FN["gelu"],
            "gelu-tanh": nn.GELU(approximate="tanh"), "gelu-new": ACT2FN["gelu_new"],
            "gelu-pytorch-tanh": ACT2FN["gelu_pytorch_tanh"], "relu": nn.ReLU(), "quick-gelu": ACT2FN["quick_gelu"]}


KERNEL = {"silu": "npu_swiglu", "hf-silu": "npu_swiglu", "swish": "npu_swiglu", "gelu": "npu_geglu",
          "gelu-tanh": "npu_geglu", "gelu-new": "npu_geglu", "gelu-pytorch-tanh": "npu_geglu", "relu": None,
          "quick-gelu": None, "tanh": "npu_geglu", "none": "npu_geglu", None: "npu_swiglu"}


@pytest.fixture(scope="module")
def npu():
    with emulated_npu() as module:
        yield module


def _mlps(spelling):
    migrated = snippets.migrated(MLPS, select=["NPU330"], spelling=spelling)
    for call, count in EMITTED.items():
        assert migrated.count(f"npu_glue.{call}") == count, (call, migrated)
    assert "F.silu(x_fc_1)" not in migrated and "* up" not in migrated.split("class Experts")[1].split("class Einsum")[0]
    activations = _activations()
    original, fused = load(MLPS, ACTIVATIONS=activations), load(migrated, ACTIVATIONS=activations)
    fused["npu_glue"]._geglu_first(torch.device("cpu"))  # the once-per-device probe, not counted below
    return original, fused


@pytest.fixture(scope="module")
def mlps(npu):
    return _mlps("as written")


@pytest.fixture(scope="module")
def mlps_low(npu):
    """Migrated with every pasted operand ``x if True else x`` (tests/rules/emulated.py)."""
    return _mlps("low precedence")


def _inputs(name, dtype, seed=4):
    g = torch.Generator().manual_seed(seed)
    if name in ("EinsumExperts", "BmmExperts"):
        return (torch.randn(3, 5, 8, generator=g).to(dtype),)
    if name == "Experts":
        return torch.randn(7, 8, generator=g).to(dtype), torch.tensor([0, 2, 1, 0, 2, 2, 1])
    return (torch.randn(2, 3, 8, generator=g).to(dtype),)


def _run(npu, before, after, name, dtype, grad=False):
    inputs = _inputs(name, dtype)
    with counting(npu, "npu_swiglu", "npu_geglu") as calls, torch.set_grad_enabled(grad):
        got = after(*inputs)
    want = before(*inputs)
    return got, want, calls


CASES = [(name, act) for name in ("LlamaMLP", "GatedActDense", "FeedForward", "Expert", "Experts", "Phi3MLP",
                                  "CpmAntDenseGatedACT")
         for act in ("silu", "hf-silu", "swish", "gelu", "gelu-tanh", "gelu-new", "gelu-pytorch-tanh", "relu",
                     "quick-gelu")]
CASES += [("LitLLaMAMLP", None), ("GeGLU", "tanh"), ("GeGLU", "none"), ("GeGLUHalves", "none"),
          ("EinsumExperts", None), ("TokensEinsum", None), ("BmmExperts", None)]


@pytest.mark.slow
@pytest.mark.parametrize("name,act", CASES)
@pytest.mark.parametrize("dtype,spelling", [(torch.float32, "as written"), (torch.bfloat16, "as written"),
                                            (torch.float32, "low precedence")])
def test_gated_mlp_forms_match_the_original(npu, mlps, mlps_low, name, act, dtype, spelling):
    before, after = twins(*(mlps if spelling == "as written" else mlps_low), name, act, dtype=dtype)
    got, want, calls = _run(npu, before, after, name, dtype)
    assert got.dtype == want.dtype
    kernel = KERNEL["none" if name == "GeGLUHalves" else act]
    torch.testing.assert_close(got.float(), want.float(), **tolerance(kernel or "npu_swiglu", dtype))
    expected = {"npu_swiglu": 0, "npu_geglu": 0}
    if kernel is not None:
        expected[kernel] = 3 if name == "Experts" else 1  # Experts: one call per expert
    assert calls == expected, "fused exactly when the activation has a kernel"


@pytest.mark.slow
@pytest.mark.parametrize("name,act", [("LlamaMLP", "silu"), ("LlamaMLP", "gelu-tanh"), ("LitLLaMAMLP", None),
                                      ("GatedActDense", "hf-silu"), ("FeedForward", "silu"), ("Expert", "silu"),
                                      ("Expert", "gelu-new"), ("GeGLU", "none"), ("Experts", "silu")])
def test_gated_mlp_gradients_match(npu, mlps, name, act):
    before, after = twins(*mlps, name, act)
    inputs = _inputs(name, torch.float32, seed=5)
    grads = []
    with counting(npu, "npu_swiglu", "npu_geglu") as calls:
        for model in (before, after):
            model(*inputs).square().sum().backward()
            grads.append([p.grad for p in model.parameters()])
    assert sum(calls.values()) >= 1, "the differentiable kernels run in training too"
    kernel = KERNEL[act] or "npu_swiglu"
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, **tolerance(kernel, torch.float32))


def test_optional_up_projection_keeps_the_original_without_it(npu, mlps):
    before, after = twins(*mlps, "FeedForward", "silu", up=False)
    x = _inputs("FeedForward", torch.float32)[0]
    with counting(npu, "npu_swiglu", "npu_geglu") as calls:
        torch.testing.assert_close(after(x), before(x))
    assert calls == {"npu_swiglu": 0, "npu_geglu": 0}


@pytest.mark.parametrize("name", ["EinsumExperts", "BmmExperts"])
def test_stacked_weights_train_fused(npu, mlps, name):
    """The two products are made as the original makes them, then concatenated: every op on the way
    is differentiable, so the experts train on the fused kernel with the original's gradients."""
    before, after = twins(*mlps, name, None)
    inputs = _inputs(name, torch.float32)
    grads = []
    with counting(npu, "npu_swiglu") as calls:
        for model in (before, after):
            model(*inputs).square().sum().backward()
            grads.append([p.grad for p in model.parameters()])
    assert calls == {"npu_swiglu": 1}
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, **tolerance("npu_swiglu", torch.float32))


def test_stacked_weights_are_read_on_every_call(npu, mlps):
    """No [gate | up] weight is kept: a change through ``.data`` (no version counter moves) shows in
    the next call, and every call concatenates the two products (activations), never the weights."""
    before, after = twins(*mlps, "EinsumExperts", None)
    x = _inputs("EinsumExperts", torch.float32)[0]
    with torch.no_grad(), counting(torch, "cat") as cats:
        after(x)
        for model in (before, after):
            model.w1.data.mul_(2)
        torch.testing.assert_close(after(x), before(x), **tolerance("npu_swiglu", torch.float32))
    assert cats["cat"] == 2


@pytest.mark.parametrize("half", ["right", "left"])
def test_geglu_finds_the_activated_half_on_the_device(npu, mlps, monkeypatch, half):
    """CANN versions document opposite meanings of npu_geglu's activate_left: the helper asks the
    kernel once per device, so the result is right under either reading."""
    import npu_migrate.kernels.activations as activations

    monkeypatch.setattr(activations, "GEGLU_DEFAULT_ACTIVATED_HALF", half)
    monkeypatch.setattr(mlps[1]["npu_glue"], "_geglu_first_flag", {})
    mlps[1]["npu_glue"]._geglu_first(torch.device("cpu"))
    for name, act in (("GeGLUHalves", None), ("GeGLU", "none"), ("LlamaMLP", "gelu")):
        before, after = twins(*mlps, name, act)
        got, want, calls = _run(npu, before, after, name, torch.float32)
        assert calls["npu_geglu"] == 1
        torch.testing.assert_close(got, want, **tolerance("npu_geglu", torch.float32))
    assert list(mlps[1]["npu_glue"]._geglu_first_flag.values()) == [half == "right"]


def test_projections_of_a_repos_own_linear_classes(npu):
    """GeGLU over the repo's own ``Linear`` (an nn.Module with its own forward) and over a subclass of
    nn.Linear that keeps its forward: both fused, the kernel runs (the helper calls the projection
    modules as the original does, so whatever their forward computes applies; fixture
    NPU330_swiglu_linear_subclass)."""
    from pathlib import Path

    case = Path(__file__).parents[2] / "fixtures" / "rules" / "NPU330_swiglu_linear_subclass"
    source = (case / "input.py").read_text()
    original, fused = load(source), load(snippets.migrated(source, select=["NPU330"]))
    fused["npu_glue"]._geglu_first(torch.device("cpu"))
    for name, kernel_runs in (("PlainGeGLU", 1), ("GeGLU", 1)):
        before, after = twins(original, fused, name, 8, 16)
        x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(0))
        with counting(npu, "npu_geglu") as calls, torch.no_grad():
            got = after(x)
        torch.testing.assert_close(got, before(x), **tolerance("npu_geglu", torch.float32))
        assert calls == {"npu_geglu": kernel_runs}, name


@pytest.mark.parametrize("act, kernel", [("silu", "npu_swiglu"), ("gelu_pytorch_tanh", "npu_geglu")])
def test_hf_experts_gate_of_the_default_experts_path_runs_fused(npu, act, kernel):
    """transformers 5 runs experts through grouped_mm / batched_mm, which gate with
    ``self._apply_gate``: the migrated class's own (fixture NPU330_swiglu_hf_experts) computes what the
    library's default does, forward and gradients, on the fused kernel; the classes left alone keep it."""
    from pathlib import Path
    from types import SimpleNamespace

    from transformers.integrations.moe import _default_apply_gate

    case = Path(__file__).parents[2] / "fixtures" / "rules" / "NPU330_swiglu_hf_experts"
    source = (case / "input.py").read_text()
    original, fused = load(source), load(snippets.migrated(source, select=["NPU330"]))
    config = SimpleNamespace(num_local_experts=2, intermediate_size=6, hidden_size=4, hidden_act=act)
    before, after = original["Experts"](config), fused["Experts"](config)
    assert before._apply_gate.__func__ is _default_apply_gate and after._apply_gate.__func__ is not _default_apply_gate
    if kernel == "npu_geglu":
        fused["npu_glue"]._geglu_first(torch.device("cpu"))
    results = []
    for experts in (before, after):
        gate_up = torch.randn(5, 12, generator=torch.Generator().manual_seed(0), requires_grad=True)
        with counting(npu, kernel) as calls:
            out = experts._apply_gate(gate_up)
            out.square().sum().backward()
        results.append((out.detach(), gate_up.grad, calls[kernel]))
    assert [r[2] for r in results] == [0, 1]
    torch.testing.assert_close(results[1][0], results[0][0], **tolerance(kernel, torch.float32))
    torch.testing.assert_close(results[1][1], results[0][1], **tolerance(kernel, torch.float32))
    assert fused["InterleavedExperts"]._apply_gate is _default_apply_gate
    x = torch.randn(3, 12)
    assert fused["OwnGate"](config)._apply_gate(x) is x  # its own gate kept


# -- issue 20: nested helpers, second-half activations, scaled projections ------------------------------
FIXTURES = Path(__file__).parents[2] / "fixtures" / "rules"
FORMS = ("NPU330_swiglu_nested", "NPU330_swiglu_second_half", "NPU330_swiglu_scaled", "NPU330_swiglu_scaled_aliased")
H, I = 8, 12


def _config(act):
    return SimpleNamespace(hidden_size=H, ffn_hidden_size=I, activation_func=act)


# (fixture, class, constructor arguments, extra forward arguments, the kernel that must run: None = the original)
FORM_CASES = [
    *[(FORMS[0], name, (_config(act),), (), kernel) for name in ("MLP", "AttributeMLP")
      for act, kernel in ((F.silu, "npu_swiglu"), (F.gelu, "npu_geglu"), (torch.relu, None))],
    (FORMS[0], "MethodMLP", (_config(F.silu),), (), "npu_swiglu"),
    *[(FORMS[1], "GatedLinearUnit", (H, I, act), (), kernel) for act, kernel in
      (("gelu", "npu_geglu"), ("gelu_pytorch_tanh", "npu_geglu"), ("silu", "npu_swiglu"), ("relu", None))],
    (FORMS[1], "GeGLUSecond", (H, I), (), "npu_geglu"),
    (FORMS[1], "GeluModuleSecond", (H, I), (), "npu_geglu"),
    (FORMS[1], "SwiGLUSecond", (H, I), (), "npu_swiglu"),
    (FORMS[2], "ScaledGate", (H, I), (), "npu_swiglu"),
    (FORMS[2], "ScaledBoth", (H, I), (3.0,), "npu_geglu"),
    (FORMS[2], "NormalizedMLP", (H, I), (), "npu_swiglu"),
    (FORMS[3], "ScaledGate", (H, I), (0.5,), "npu_swiglu"),
    (FORMS[3], "GeGLUSecond", (H, I), (), "npu_geglu"),
    (FORMS[3], "Nested", (H, I), (), "npu_swiglu"),
]


@pytest.fixture(scope="module")
def forms(npu):
    """Each fixture's input and its migration (NPU330), executed."""
    loaded = {}
    for name in FORMS:
        source = (FIXTURES / name / "input.py").read_text()
        original, fused = load(source), load(snippets.migrated(source, select=["NPU330"]))
        fused["npu_glue"]._geglu_first(torch.device("cpu"))  # the once-per-device probe, not counted below
        loaded[name] = original, fused
    return loaded


def _form_input(name, dtype, seed=9):
    width = 2 * I if name == "SwiGLUSecond" else H
    return torch.randn(2, 3, width, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _form_run(npu, forms, case, dtype, grad=False):
    """(original, migrated, migrated output, original output, original input, migrated input); ``grad``: in
    training, each side on its own copy of an input that needs a gradient too."""
    fixture, name, args, extra, kernel = case
    before, after = twins(*forms[fixture], name, *args, dtype=dtype)
    x = _form_input(name, dtype)
    x0, x1 = (x.clone().requires_grad_(), x.clone().requires_grad_()) if grad else (x, x)
    with counting(npu, "npu_swiglu", "npu_geglu") as calls, torch.set_grad_enabled(grad):
        got = after(x1, *extra)
    with torch.set_grad_enabled(grad):
        want = before(x0, *extra)
    expected = {"npu_swiglu": 0, "npu_geglu": 0}
    if kernel is not None:
        expected[kernel] = 1
    assert calls == expected, "fused exactly when the activation has a kernel"
    assert got.dtype == want.dtype and got.shape == want.shape
    return before, after, got, want, x0, x1


def _case_id(case):
    return f"{case[0].split('_', 2)[-1]}-{case[1]}-{getattr(case[2][-1], '__name__', case[2][-1])}"


@pytest.mark.slow
@pytest.mark.parametrize("case", FORM_CASES, ids=[_case_id(c) for c in FORM_CASES])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_issue_20_forms_match_the_original(npu, forms, case, dtype):
    _, _, got, want, *_ = _form_run(npu, forms, case, dtype)
    if case[-1] is None:
        assert torch.equal(got, want), "the original runs"
    else:
        torch.testing.assert_close(got.float(), want.float(), **tolerance(case[-1], dtype))


@pytest.mark.parametrize("case", [c for c in FORM_CASES if c[-1] is not None and c[1] in
                                  ("MLP", "GatedLinearUnit", "GeGLUSecond", "SwiGLUSecond", "ScaledBoth",
                                   "NormalizedMLP")], ids=_case_id)
def test_issue_20_forms_train_with_the_original_gradients(npu, forms, case):
    """npu_swiglu and npu_geglu are differentiable: the fused forms train, with the original's gradients."""
    before, after, got, want, *inputs = _form_run(npu, forms, case, torch.float32, grad=True)
    torch.testing.assert_close(got, want, **tolerance(case[-1], torch.float32))
    grads = []
    for model, out in ((before, want), (after, got)):
        out.square().sum().backward()
        grads.append([p.grad for p in model.parameters()] + [inputs[model is after].grad])
    for g1, g0 in zip(grads[1], grads[0]):
        torch.testing.assert_close(g1, g0, **tolerance(case[-1], torch.float32))


@pytest.mark.parametrize("half", ["right", "left"])
def test_second_half_geglu_under_either_reading_of_activate_left(npu, forms, monkeypatch, half):
    """npu_geglu's activate_left is asked of the kernel once per device: the second half is activated
    (``activate_left`` the opposite of the first half's) under either documented meaning of the flag."""
    import npu_migrate.kernels.activations as activations

    glue = forms[FORMS[1]][1]["npu_glue"]
    monkeypatch.setattr(activations, "GEGLU_DEFAULT_ACTIVATED_HALF", half)
    monkeypatch.setattr(glue, "_geglu_first_flag", {})
    glue._geglu_first(torch.device("cpu"))
    for case in [c for c in FORM_CASES if c[0] == FORMS[1] and c[-1] == "npu_geglu"]:
        _, _, got, want, *_ = _form_run(npu, forms, case, torch.float32)
        torch.testing.assert_close(got, want, **tolerance("npu_geglu", torch.float32))
    assert list(glue._geglu_first_flag.values()) == [half == "right"]


def test_scaled_operands_are_evaluated_in_the_original_order(npu, forms):
    """``up * act(gate)`` with both written in the product: the helper's keywords keep the up projection
    first, as the original calls it (it matters to modules that draw random numbers or count calls)."""
    order = []
    before, after = twins(*forms[FORMS[2]], "ScaledBoth", H, I)
    for model in (before, after):
        model.w1.register_forward_hook(lambda *_: order.append("gate"))
        model.w3.register_forward_hook(lambda *_: order.append("up"))
    x = _form_input("ScaledBoth", torch.float32)
    with torch.no_grad():
        before(x, 3.0)
        after(x, 3.0)
    assert order == ["up", "gate", "up", "gate"]


@pytest.mark.parametrize("renaming", list(snippets.RENAMINGS))
@pytest.mark.parametrize("case", sorted(FIXTURES.glob("NPU33*")), ids=lambda p: p.name)
def test_gated_mlp_findings_do_not_depend_on_names(case, renaming):
    """The same code under other class and function names gives the same findings and output."""
    snippets.same_when_renamed((case / "input.py").read_text(), "input.py", ["NPU330", "NPU331"], renaming)
