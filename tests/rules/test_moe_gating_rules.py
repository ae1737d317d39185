"""NPU340: every router form the rule rewrites computes what the original computes on the emulated
NPU (the same experts, weights within the kernel's tolerance, the original's dtypes), the kernel
running exactly where its guard says: the softmax kernels in inference only, npu_moe_gating_top_k
also in training (it has a backward) unless its scores are read afterwards.

The top-k softmax v2 and the group-limited ``npu_moe_gating_top_k`` are emulated from the kernels
engineer's branch on; until then the tests that call them are skipped with that reason."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests import snippets
from tests.rules.emulated import counting, emulated_npu, load, tolerance

ROUTERS = '''
import torch
import torch.nn.functional as F
from torch import nn

E, H = 16, 8


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


def moe_layer(gate_logits, top_k):
    weights, selected_experts = torch.topk(gate_logits, top_k)
    weights = F.softmax(weights, dim=1, dtype=torch.float).to(gate_logits.dtype)
    return weights, selected_experts


def granite_gate(router_logits, top_k):
    top_k_logits, top_k_index = router_logits.topk(top_k, dim=-1)
    top_k_weights = torch.softmax(top_k_logits, dim=-1).type_as(router_logits)
    return top_k_weights, top_k_index


def load_balancing(gate_logits, top_k):
    routing_weights = F.softmax(gate_logits, dim=-1)
    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = F.one_hot(selected_experts, E)
    tokens_per_expert = torch.mean(expert_mask.float(), dim=0)
    router_prob_per_expert = torch.mean(routing_weights, dim=0)
    return torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * E, selected_experts


class DeepseekV3TopkRouter(nn.Module):
    def __init__(self, norm_topk_prob=True):
        super().__init__()
        self.top_k, self.num_experts, self.num_group, self.topk_group = 4, E, 4, 2
        self.norm_topk_prob, self.routed_scaling_factor = norm_topk_prob, 2.5
        self.weight = nn.Parameter(torch.randn(E, H))
        self.register_buffer("e_score_correction_bias", torch.randn(E) * 0.1)

    def forward(self, router_logits):
        scores = router_logits.sigmoid()
        scores_for_choice = scores + self.e_score_correction_bias
        group_scores = (
            scores_for_choice.view(-1, self.num_group, self.num_experts // self.num_group)
            .topk(2, dim=-1)[0]
            .sum(dim=-1)
        )
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = (
            group_mask.unsqueeze(-1)
            .expand(-1, self.num_group, self.num_experts // self.num_group)
            .reshape(-1, self.num_experts)
        )
        scores_for_choice = scores_for_choice.masked_fill(~score_mask.bool(), float("-inf"))
        topk_indices = torch.topk(scores_for_choice, k=self.top_k, dim=-1, sorted=False)[1]
        topk_weights = scores.gather(1, topk_indices)
        if self.norm_topk_prob:
            denominator = topk_weights.sum(dim=-1, keepdim=True) + 1e-20
            topk_weights /= denominator
        topk_weights = topk_weights * self.routed_scaling_factor
        return topk_weights, topk_indices


class GroupedTopkRouter(nn.Module):
    """litgpt: the choice in a no-grad helper, dropped groups filled with 0, the group score from config."""

    def __init__(self, top_in_group=2, bias=0.1):
        super().__init__()
        self.config = CONFIG(n_expert=E, n_expert_groups=4, n_topk_scores_per_group=top_in_group, n_topk_groups=2,
                             n_expert_per_token=4, norm_topk_prob=True)
        self.register_buffer("e_score_correction_bias", torch.rand(E) * bias)

    @torch.no_grad()
    def get_topk_indices(self, scores):
        scores_for_choice = scores.view(-1, self.config.n_expert) + self.e_score_correction_bias.unsqueeze(0)
        group_scores = (
            scores_for_choice.view(-1, self.config.n_expert_groups, self.config.n_expert // self.config.n_expert_groups)
            .topk(self.config.n_topk_scores_per_group, dim=-1)[0]
            .sum(dim=-1)
        )
        group_idx = torch.topk(group_scores, k=self.config.n_topk_groups, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = (
            group_mask.unsqueeze(-1)
            .expand(-1, self.config.n_expert_groups, self.config.n_expert // self.config.n_expert_groups)
            .reshape(-1, self.config.n_expert)
        )
        scores_for_choice = scores_for_choice.masked_fill(~score_mask.bool(), 0.0)
        topk_indices = torch.topk(scores_for_choice, k=self.config.n_expert_per_token, dim=-1, sorted=False)[1]
        return topk_indices

    def forward(self, router_logits):
        scores = router_logits.sigmoid()
        topk_indices = self.get_topk_indices(scores)
        topk_weights = scores.gather(1, topk_indices)
        if self.config.norm_topk_prob:
            denominator = topk_weights.sum(dim=-1, keepdim=True) + 1e-20
            topk_weights /= denominator
        return topk_weights, topk_indices


class MiniMaxM2TopKRouter(nn.Module):
    def __init__(self):
        super().__init__()
        self.top_k = 3

    def forward(self, router_logits, e_score_correction_bias):
        routing_weights = nn.functional.sigmoid(router_logits.float())
        scores_for_choice = routing_weights + e_score_correction_bias
        _, top_k_index = torch.topk(scores_for_choice, self.top_k, dim=-1, sorted=False)
        top_k_weights = routing_weights.gather(1, top_k_index)
        top_k_weights /= top_k_weights.sum(dim=-1, keepdim=True)
        return top_k_weights, top_k_index


class LongcatRouter(nn.Module):
    def __init__(self):
        super().__init__()
        self.top_k, self.routed_scaling_factor = 3, 6.0
        self.register_buffer("e_score_correction_bias", torch.randn(E) * 0.01)

    def forward(self, router_logits):
        scores = router_logits.softmax(dim=-1)
        topk_indices = torch.topk(scores + self.e_score_correction_bias, k=self.top_k, dim=-1, sorted=False)[1]
        topk_weights = scores.gather(1, topk_indices)
        topk_weights = topk_weights * self.routed_scaling_factor
        return topk_weights.to(router_logits.dtype), topk_indices


class DeepseekV2Router(nn.Module):
    def __init__(self, topk_method="greedy"):
        super().__init__()
        self.top_k, self.num_experts, self.num_group, self.topk_group = 4, E, 4, 2
        self.topk_method, self.routed_scaling_factor = topk_method, 16.0

    def forward(self, router_logits):
        scores = router_logits.softmax(dim=-1, dtype=torch.float32)
        if self.topk_method == "greedy":
            topk_weights, topk_indices = torch.topk(scores, k=self.top_k, dim=-1, sorted=False)
        elif self.topk_method == "group_limited_greedy":
            group_scores = scores.view(-1, self.num_group, self.num_experts // self.num_group).max(dim=-1).values
            group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
            group_mask = torch.zeros_like(group_scores)
            group_mask.scatter_(1, group_idx, 1)
            score_mask = (
                group_mask.unsqueeze(-1)
                .expand(-1, self.num_group, self.num_experts // self.num_group)
                .reshape(-1, self.num_experts)
            )
            scores = scores.masked_fill(~score_mask.bool(), 0.0)
            topk_weights, topk_indices = torch.topk(scores, k=self.top_k, dim=-1, sorted=False)
        topk_weights = topk_weights * self.routed_scaling_factor
        return topk_weights, topk_indices


class ScoresReturned(nn.Module):
    def __init__(self):
        super().__init__()
        self.top_k = 2
        self.register_buffer("e_score_correction_bias", torch.randn(E) * 0.1)

    def forward(self, router_logits):
        scores = router_logits.sigmoid()
        topk_indices = torch.topk(scores + self.e_score_correction_bias, k=self.top_k, dim=-1)[1]
        topk_weights = scores.gather(1, topk_indices)
        topk_weights = topk_weights / (topk_weights.sum(dim=-1, keepdim=True) + 1e-20)
        return topk_weights, topk_indices, scores
'''

SOFTMAX, V2, GROUPED = "npu_moe_gating_top_k_softmax", "npu_moe_gating_top_k_softmax_v2", "npu_moe_gating_top_k"
EMITTED = {f"torch_npu.{SOFTMAX}(": 4, f"torch_npu.{V2}(": 3, f"torch_npu.{GROUPED}(": 6}
# name -> (kernel, builds a module, takes a bias argument, returns the scores too)
CASES = {
    "route": (SOFTMAX, False), "route_upcast": (SOFTMAX, False), "route_in_dtype": (SOFTMAX, False),
    "moe_layer": (V2, False), "granite_gate": (V2, False), "load_balancing": (V2, False),
    "DeepseekV3TopkRouter": (GROUPED, True), "GroupedTopkRouter": (GROUPED, True),
    "MiniMaxM2TopKRouter": (GROUPED, True), "LongcatRouter": (GROUPED, True), "ScoresReturned": (GROUPED, True),
}


@pytest.fixture(scope="module")
def npu():
    with emulated_npu() as module:
        yield module


def _routers(spelling):
    migrated = snippets.migrated(ROUTERS, select=["NPU340"], spelling=spelling)
    for call, count in EMITTED.items():
        assert migrated.count(call) == count, (call, migrated)
    config = lambda **kw: SimpleNamespace(**kw)  # noqa: E731
    return load(ROUTERS, CONFIG=config), load(migrated, CONFIG=config)


@pytest.fixture(scope="module")
def routers(npu):
    return _routers("as written")


@pytest.fixture(scope="module")
def routers_low(npu):
    """Migrated with every pasted operand ``x if True else x`` (tests/rules/emulated.py)."""
    return _routers("low precedence")


def needs(npu, kernel):
    if not hasattr(npu, kernel):
        pytest.skip(f"the emulator has no torch_npu.{kernel} yet (the kernels engineer's branch adds it)")


def call(namespaces, name, logits, build=False, **kwargs):
    """(original result, migrated result) of the function or module ``name`` on the same inputs."""
    if not build:
        return namespaces[0][name](logits, 4), namespaces[1][name](logits, 4)
    torch.manual_seed(0)
    before = namespaces[0][name](**kwargs).to(logits.dtype)  # buffers (the bias) in the logits' dtype
    torch.manual_seed(0)
    after = namespaces[1][name](**kwargs).to(logits.dtype)
    extra = (torch.randn(16) * 0.1,) if name == "MiniMaxM2TopKRouter" else ()
    return before(logits, *extra), after(logits, *extra)


def by_expert(weights, indices):
    """Weights and indices with each row in expert order (the order of an unsorted top-k is unspecified)."""
    indices, order = indices.sort(dim=-1)
    return weights.gather(-1, order), indices


def check(want, got, kernel, dtype):
    (w0, i0), (w1, i1) = want[:2], got[:2]
    assert i1.dtype == i0.dtype == torch.int64 and w1.dtype == w0.dtype
    if w0.dim() == 2 and i0.shape == w0.shape:
        (w0, i0), (w1, i1) = by_expert(w0, i0), by_expert(w1, i1)
    assert torch.equal(i1, i0), "the same experts"
    torch.testing.assert_close(w1.float(), w0.float(), **tolerance(kernel, dtype))
    for extra0, extra1 in zip(want[2:], got[2:]):
        assert extra1.dtype == extra0.dtype
        torch.testing.assert_close(extra1.float(), extra0.float(), **tolerance(kernel, dtype))


def logits(dtype, seed=6, rows=6):
    return (torch.randn(rows, 16, generator=torch.Generator().manual_seed(seed)) * 2).to(dtype)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype,spelling", [(torch.float32, "as written"), (torch.bfloat16, "as written"),
                                            (torch.float32, "low precedence")])
def test_router_matches_the_original_in_inference(npu, routers, routers_low, name, dtype, spelling):
    kernel, build = CASES[name]
    needs(npu, kernel)
    with counting(npu, kernel) as calls, torch.no_grad():
        want, got = call(routers if spelling == "as written" else routers_low, name, logits(dtype), build)
    assert calls == {kernel: 1}
    if name == "load_balancing":  # (loss, experts): the loss is computed from the kernel's probabilities
        torch.testing.assert_close(got[0], want[0], **tolerance(V2, dtype))
        assert torch.equal(got[1], want[1])
        return
    check(want, got, kernel, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["route", "moe_layer", "load_balancing", "ScoresReturned"])
def test_inference_only_kernels_keep_the_original_when_training(npu, routers, name):
    kernel, build = CASES[name]
    needs(npu, kernel)
    x = logits(torch.float32, seed=7).requires_grad_()
    with counting(npu, kernel) as calls:
        want, got = call(routers, name, x, build)
        got[0].sum().backward()
    assert calls == {kernel: 0} and x.grad is not None
    assert all(torch.equal(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("name", ["DeepseekV3TopkRouter", "GroupedTopkRouter", "MiniMaxM2TopKRouter", "LongcatRouter"])
def test_grouped_kernel_trains_with_the_original_gradients(npu, routers, name):
    needs(npu, GROUPED)
    grads = []
    with counting(npu, GROUPED) as calls:
        for side in (0, 1):
            x = logits(torch.float32, seed=8).requires_grad_()
            torch.manual_seed(0)
            module = routers[side][name]()
            extra = (torch.randn(16) * 0.1,) if name == "MiniMaxM2TopKRouter" else ()
            weights, indices = module(x, *extra)[:2]
            per_expert = torch.zeros_like(x).scatter(1, indices, weights)  # as experts combine: order-free
            (per_expert * torch.arange(1.0, 17.0)).sum().backward()
            grads.append(x.grad)
    assert calls == {GROUPED: 1}, "npu_moe_gating_top_k has a backward: it runs in training"
    torch.testing.assert_close(grads[1], grads[0], **tolerance(GROUPED, torch.float32))


def test_renormalisation_flag_joins_the_guard(npu, routers):
    needs(npu, GROUPED)
    with counting(npu, GROUPED) as calls, torch.no_grad():
        want, got = call(routers, "DeepseekV3TopkRouter", logits(torch.float32), True, norm_topk_prob=False)
    assert calls == {GROUPED: 0}, "without the renormalisation the kernel's weights differ: the original runs"
    check(want, got, GROUPED, torch.float32)


def test_zero_filled_groups_need_a_nonnegative_bias(npu, routers):
    """litgpt fills the dropped groups with 0, not -inf: with a negative bias a dropped expert can
    outrank a kept one, and the guard (a value check, once per bias tensor) keeps the original."""
    needs(npu, GROUPED)
    for bias, fused in ((0.1, 1), (-0.9, 0)):
        with counting(npu, GROUPED) as calls, torch.no_grad():
            want, got = call(routers, "GroupedTopkRouter", logits(torch.float32), True, bias=bias)
        assert calls == {GROUPED: fused}
        if bias < 0:
            got = (got[0], got[1])
        check(want, got, GROUPED, torch.float32)


@pytest.mark.parametrize("top_in_group,fused", [(1, 1), (2, 1), (3, 0)])
def test_group_score_from_a_config_value(npu, routers, top_in_group, fused):
    needs(npu, GROUPED)
    with counting(npu, GROUPED) as calls, torch.no_grad():
        want, got = call(routers, "GroupedTopkRouter", logits(torch.float32), True, top_in_group=top_in_group)
    assert calls == {GROUPED: fused}, "the kernel scores a group by its max (1) or top-2 sum (2) only"
    check(want, got, GROUPED, torch.float32)


@pytest.mark.parametrize("method,kernel", [("greedy", SOFTMAX), ("group_limited_greedy", GROUPED)])
def test_each_branch_of_a_router_is_fused_on_its_own(npu, routers, method, kernel):
    needs(npu, kernel)
    present = [op for op in (SOFTMAX, GROUPED) if hasattr(npu, op)]
    with counting(npu, *present) as calls, torch.no_grad():
        want, got = call(routers, "DeepseekV2Router", logits(torch.float32), True, topk_method=method)
    assert calls[kernel] == 1 and sum(calls.values()) == 1, "only the branch that runs is fused"
    check(want, got, kernel, torch.float32)


def test_softmax_router_with_three_d_logits_and_dim_one_falls_back(npu, routers):
    x = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(8))
    with counting(npu, SOFTMAX) as calls, torch.no_grad():
        want, got = call(routers, "route", x)
    assert calls == {SOFTMAX: 0}
    assert all(torch.equal(g, w) for g, w in zip(got, want))


# -- issue 20: routers through helpers, score-function routing, casts of the scores ---------------------
FIXTURES = Path(__file__).parents[2] / "fixtures" / "rules"
HELPERS = ("NPU340_moe_gating_helpers", "NPU340_moe_gating_helpers_aliased")
DIM_ONE = '''
import torch


def topk_over_dim_one(router_logits, top_k):
    probs = torch.softmax(router_logits, dim=-1)
    weights, experts = torch.topk(probs, top_k, dim=1)
    return weights, experts
'''


@pytest.fixture(scope="module")
def helpers(npu):
    loaded = {}
    for name in HELPERS:
        source = (FIXTURES / name / "input.py").read_text()
        loaded[name] = load(source), load(snippets.migrated(source, select=["NPU340"]))
    loaded["dim_one"] = load(DIM_ONE), load(snippets.migrated(DIM_ONE, select=["NPU340"]))
    return loaded


def _both(namespaces, name, *args, build=None):
    """(original result, migrated result) of ``name`` (a class built with ``build`` first) on ``args``."""
    results = []
    for namespace in namespaces:
        torch.manual_seed(0)
        target = namespace[name](*build) if build is not None else namespace[name]
        results.append(target(*args))
    return results


@pytest.mark.parametrize("dtype,fused", [(torch.float32, 1), (torch.bfloat16, 0)])
@pytest.mark.parametrize("fixture,name", [(HELPERS[0], "topk_routing_with_score_function"), (HELPERS[1], "route")])
def test_scores_cast_back_fuse_where_the_cast_keeps_their_dtype(npu, helpers, fixture, name, dtype, fused):
    """``softmax(x, dtype=float32).type_as(x)`` then a top-k (in a helper): fused where the cast keeps the
    dtype (float32 logits); in bfloat16 the cast rounds the scores the top-k chooses from, which the kernel
    does not: the original runs, bit for bit."""
    with counting(npu, SOFTMAX) as calls, torch.no_grad():
        want, got = _both(helpers[fixture], name, logits(dtype), 4)
    assert calls == {SOFTMAX: fused}
    if fused:
        check(want, got, SOFTMAX, dtype)
    else:
        assert all(torch.equal(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("dtype,fused", [(torch.float32, 1), (torch.bfloat16, 0)])
def test_sigmoid_score_function_with_a_bias_fuses_and_trains(npu, helpers, dtype, fused):
    needs(npu, GROUPED)
    bias = torch.randn(16, generator=torch.Generator().manual_seed(3)) * 0.1
    grads, results = [], []
    with counting(npu, GROUPED) as calls:
        for namespace in helpers[HELPERS[0]]:
            x = logits(dtype, seed=8).requires_grad_()
            weights, indices = namespace["topk_routing_with_score_function"](x, 4, "sigmoid", bias)
            torch.zeros_like(x).scatter(1, indices, weights).mul(torch.arange(1.0, 17.0)).sum().backward()
            results.append((weights, indices))
            grads.append(x.grad)
    assert calls == {GROUPED: fused}, "npu_moe_gating_top_k has a backward: it runs in training too"
    check(results[0], results[1], GROUPED, dtype)
    torch.testing.assert_close(grads[1].float(), grads[0].float(), **tolerance(GROUPED, dtype))


@pytest.mark.parametrize("fixture,name", [(HELPERS[0], "TopKRouter"), (HELPERS[1], "Block")])
def test_top_k_in_a_helper_is_fused_where_it_is_called(npu, helpers, fixture, name):
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(5))
    with counting(npu, SOFTMAX) as calls, torch.no_grad():
        want, got = _both(helpers[fixture], name, x, build=(8, 16, 4))
    assert calls == {SOFTMAX: 1}
    check(want, got, SOFTMAX, torch.float32)


@pytest.mark.parametrize("shape,fused", [((6, 16), 1), ((2, 3, 16), 0)])
def test_a_top_k_over_dim_one_is_checked_to_be_the_last(npu, helpers, shape, fused):
    """softmax over the last dim, top-k over dim 1: the kernel's choice only where dim 1 is the last."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(2))
    with counting(npu, SOFTMAX) as calls, torch.no_grad():
        want, got = _both(helpers["dim_one"], "topk_over_dim_one", x, 2)
    assert calls == {SOFTMAX: fused}
    if fused:
        check(want, got, SOFTMAX, torch.float32)
    else:
        assert all(torch.equal(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("renaming", list(snippets.RENAMINGS))
@pytest.mark.parametrize("case", sorted(FIXTURES.glob("NPU34*")), ids=lambda p: p.name)
def test_router_findings_do_not_depend_on_names(case, renaming):
    """The same code under other class and function names (neutral ones, another framework's router
    names) gives the same findings and output: no name decides what is fused or reported."""
    snippets.same_when_renamed((case / "input.py").read_text(), "input.py", ["NPU340", "NPU341"], renaming)
