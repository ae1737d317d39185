"""npu_glue's SwiGLU: ``swiglu_linear`` calls the gate and up projections as the original does and runs
npu_swiglu on their outputs concatenated (one copy of the activations per call, no weight kept between
calls), so the result follows the parameters through every change, gradients reach the original
parameters, any projection module fuses (hooks, overridden forwards, parametrized or pruned weights),
other activations run the original, and npu_swiglu never gets a non-contiguous or empty input."""

import pytest
import torch
import torch.nn.functional as F
import torch.nn.utils.parametrize
import torch.nn.utils.prune
from torch import nn

from tests.helpers.support import assert_parity, counted, tolerance

SWIGLU = "torch_npu.npu_swiglu"

DIM, HIDDEN = 16, 24


class MLP(nn.Module):
    """A Llama-style gated MLP; ``glue`` switches its forward to the migrated one."""

    def __init__(self, bias=False, act=F.silu, glue=None):
        super().__init__()
        self.gate, self.up, self.down = nn.Linear(DIM, HIDDEN, bias=bias), nn.Linear(DIM, HIDDEN, bias=bias), nn.Linear(HIDDEN, DIM)
        self.act, self.glue = act, glue

    def forward(self, x):
        if self.glue is None:
            return self.down(self.act(self.gate(x)) * self.up(x))
        return self.down(self.glue.swiglu_linear(self.act, self.gate, self.up, x))


def pair(glue, **kwargs):
    torch.manual_seed(0)
    original = MLP(**kwargs)
    migrated = MLP(**kwargs, glue=glue)
    migrated.load_state_dict(original.state_dict())
    return original, migrated


def tokens(dtype=torch.float32, shape=(2, 5), seed=1):
    return torch.randn(*shape, DIM, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
def test_one_copy_of_the_activations_per_call_no_weight_copy(glue, spy, dtype, bias):
    original, migrated = (m.to(dtype) for m in pair(glue, bias=bias))
    x = tokens(dtype)
    with torch.no_grad():
        outs = [counted(migrated, x) for _ in range(3)]
        want = original(x)
    assert all(ops.counts["cat"] == 1 and ops.counts["weight_cat"] == 0 for _, ops in outs)  # every call alike
    assert spy["npu_swiglu"] == 3
    torch.testing.assert_close(outs[-1][0], want, **tolerance(SWIGLU, dtype))


@pytest.mark.parametrize("bias", [False, True])
def test_gradients_reach_the_original_parameters(glue, spy, bias):
    original, migrated = pair(glue, bias=bias)
    x = tokens()
    grads = []
    for model in (original, migrated):
        xg = x.clone().requires_grad_()
        model(xg).pow(2).sum().backward()
        grads.append({"x": xg.grad, **{n: p.grad for n, p in model.named_parameters()}})
    assert spy["npu_swiglu"] == 1
    assert grads[1].keys() == grads[0].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.slow
def test_training_under_autocast(glue, spy):
    original, migrated = pair(glue, bias=True)
    x = tokens()
    results = []
    for model in (original, migrated):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        out.float().pow(2).sum().backward()
        results.append((out, {n: p.grad for n, p in model.named_parameters()}))
    (want, want_grads), (got, got_grads) = results
    assert spy["npu_swiglu"] == 1 and got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, **tolerance(SWIGLU, torch.bfloat16))
    for name, grad in want_grads.items():
        assert got_grads[name].dtype == grad.dtype == torch.float32
        assert_parity(got_grads[name], grad, torch.bfloat16)  # bf16 matmuls and roundings, as under autocast


def _changed(model, change, step):
    """Apply ``change`` to ``model``'s parameters (the same on both twins: seeded)."""
    torch.manual_seed(10 + step)
    params = [model.gate.weight, model.up.weight]
    if change == "in_place":  # an optimizer step written by hand: the version counter moves
        model.up.weight.mul_(0.5)
    elif change == "data_in_place":  # EMA, checkpoint loaders: the version counter stays
        model.gate.weight.data.add_(torch.randn(HIDDEN, DIM))
    elif change == "foreach":  # torch._foreach_*, as foreach optimizers update
        torch._foreach_add_(params, [torch.randn(HIDDEN, DIM) for _ in params])
    elif change == "load_state_dict":
        model.load_state_dict({k: torch.randn_like(v) for k, v in model.state_dict().items()})
    elif change == "new_parameter":
        model.gate.weight = nn.Parameter(torch.randn(HIDDEN, DIM))
    elif change == "tied":  # up shares gate's parameter
        model.up.weight = model.gate.weight
    elif change == "to_dtype":  # Module.to() swaps the parameters' data, not the Parameter objects
        model.half()  # float16 (float64 is not an NPU dtype: that site would run the original)
    elif change == "data_replaced":
        model.gate.weight.data = torch.ones(HIDDEN, DIM)
    elif change == "set_":
        model.up.weight.set_(torch.randn(HIDDEN, DIM))


@pytest.mark.slow
@pytest.mark.parametrize("change", ["in_place", "data_in_place", "foreach", "load_state_dict", "new_parameter", "tied",
                                    "to_dtype", "data_replaced", "set_"])
def test_result_follows_the_parameters_through_every_change(glue, spy, change):
    original, migrated = pair(glue)
    x = tokens()
    with torch.no_grad():
        for step in range(2):
            migrated(x)  # a call before each change: nothing it computed may be reused after
            for model in (original, migrated):
                _changed(model, change, step)
            x = x.to(original.gate.weight.dtype)
            torch.testing.assert_close(migrated(x), original(x), **tolerance(SWIGLU, x.dtype))
    assert spy["npu_swiglu"] == 4


@pytest.mark.slow
@pytest.mark.parametrize("options", [{"foreach": True}, {"fused": True}, {"foreach": False}])
def test_adamw_steps_keep_the_result(glue, spy, options):
    """The issue's report: AdamW(fused=True) moves no version counter; 4 steps, then compare."""
    original, migrated = pair(glue, bias=True)
    x = tokens()
    losses = []
    for model in (original, migrated):
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, **options)
        torch.manual_seed(0)
        for _ in range(4):
            optimizer.zero_grad()
            loss = (model(x) * torch.randn(2, 5, DIM)).sum()
            loss.backward()
            optimizer.step()
        losses.append(loss.detach())
        with torch.no_grad():
            losses.append(model(x))
    assert spy["npu_swiglu"] == 5
    torch.testing.assert_close(losses[2], losses[0])
    torch.testing.assert_close(losses[3], losses[1])


class OverriddenLinear(nn.Linear):
    def forward(self, x):
        return super().forward(x) * 2


def projection_cases():
    def hooked(m):
        m.gate.register_forward_hook(lambda mod, args, out: out + 1)

    def pre_hooked(m):
        m.up.register_forward_pre_hook(lambda mod, args: (args[0] * 3,))

    def backward_hooked(m):
        m.gate.register_full_backward_hook(lambda mod, grad_in, grad_out: None)

    def overridden(m):
        state = m.gate.state_dict()
        m.gate = OverriddenLinear(DIM, HIDDEN, bias=False)
        m.gate.load_state_dict(state)

    def instance_forward(m):  # accelerate-style hooks replace forward on the instance
        plain = m.up.forward
        m.up.forward = lambda x: plain(x) - 1

    def pruned(m):
        torch.nn.utils.prune.random_unstructured(m.gate, "weight", amount=0.5)

    def parametrized(m):
        torch.nn.utils.parametrize.register_parametrization(m.up, "weight", Doubled())

    def inference_weights(m):
        with torch.inference_mode():
            m.gate.weight = nn.Parameter(m.gate.weight.detach().clone())

    return {f.__name__: f for f in (hooked, pre_hooked, backward_hooked, overridden, instance_forward, pruned,
                                    parametrized, inference_weights)}


class Doubled(nn.Module):
    def forward(self, w):
        return 2 * w


@pytest.mark.parametrize("case", ["hooked", "pre_hooked", "backward_hooked", "overridden", "instance_forward", "pruned",
                                  "parametrized", "inference_weights", "gelu"])
def test_any_projection_module_runs_as_the_original_calls_it(glue, spy, case):
    """The projections are called, not re-derived from their weights: whatever the module does applies,
    and the product fuses (a GELU gate runs the original: not SiLU)."""
    original, migrated = pair(glue)
    for model in (original, migrated):
        torch.manual_seed(5)
        if case == "gelu":
            model.act = F.gelu
        else:
            projection_cases()[case](model)
    if case == "overridden":
        migrated.gate.load_state_dict(original.gate.state_dict())
    x = tokens()
    with torch.no_grad():
        torch.testing.assert_close(migrated(x), original(x))
    assert spy["npu_swiglu"] == (0 if case == "gelu" else 1)


@pytest.mark.parametrize("up_first", [False, True])
def test_fallback_calls_the_projections_in_the_originals_order(glue, up_first):
    calls = []

    class Recorded(nn.Module):
        def __init__(self, name):
            super().__init__()
            self.name = name

        def forward(self, x):
            calls.append(self.name)
            return x + len(self.name)

    gate, up, x = Recorded("gate"), Recorded("up"), tokens()
    got = glue.swiglu_linear(F.silu, gate, up, x, up_first=up_first)
    assert calls == (["up", "gate"] if up_first else ["gate", "up"])
    torch.testing.assert_close(got, F.silu(x + 4) * (x + 2))


def test_hooks_see_the_call_and_the_product_fuses(glue, spy):
    original, migrated = pair(glue)
    seen = []
    migrated.gate.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    x = tokens()
    with torch.no_grad():
        torch.testing.assert_close(migrated(x), original(x))
    assert spy["npu_swiglu"] == 1 and seen == [(2, 5, HIDDEN)]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_swiglu_linear_trains_like_the_original(glue, backend):
    original, migrated = pair(glue, bias=True)
    x = tokens()
    torch._dynamo.reset()
    compiled = torch.compile(migrated, fullgraph=True, backend=backend)
    compiled(x).pow(2).sum().backward()
    original(x).pow(2).sum().backward()
    torch._dynamo.reset()
    for (name, p), q in zip(original.named_parameters(), migrated.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=lambda m, name=name: f"{name}: {m}")


def test_swiglu_halves_refuses_non_contiguous_and_empty_input(glue, spy):
    gate_up = torch.randn(4, 2 * HIDDEN)
    halves = lambda t: (lambda g, u: F.silu(g) * u)(*t.chunk(2, dim=-1))  # noqa: E731
    strided = torch.randn(2 * HIDDEN, 4).t()  # a transposed view
    empty = torch.randn(0, 2 * HIDDEN)
    for t in (strided, empty):
        torch.testing.assert_close(glue.swiglu_halves(F.silu, t), halves(t))
    assert spy["npu_swiglu"] == 0
    torch.testing.assert_close(glue.swiglu_halves(F.silu, gate_up), halves(gate_up))
    assert spy["npu_swiglu"] == 1


def test_swiglu_of_separate_activations_still_fuses(glue, spy):
    """Separate activations (a site whose projections the rule does not see as modules): one cat, fused."""
    gate, up = torch.randn(3, HIDDEN), torch.randn(3, HIDDEN)
    torch.testing.assert_close(glue.swiglu(F.silu, gate, up), F.silu(gate) * up)
    assert spy["npu_swiglu"] == 1
