"""The MoE gating ops against Hugging Face routers and the goldens written from torch_npu's docs."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from npu_migrate.kernels._checks import NpuOpError
from npu_migrate.kernels.moe_gating import npu_moe_gating_top_k, npu_moe_gating_top_k_softmax, npu_moe_gating_top_k_softmax_v2
from tests.kernels import golden
from tests.tolerances import DTYPES, assert_close

NUM_ROWS, E, K = 6, 8, 2


def mixtral_router(logits, top_k):
    """MixtralSparseMoeBlock: softmax in float32, then top-k (renormalisation comes after, separately)."""
    weights = F.softmax(logits, dim=-1, dtype=torch.float)
    return torch.topk(weights, top_k, dim=-1)


def upstream_logits(shape, dtype, seed=0, low=-1.0, high=1.0):
    """uniform(low, high) logits as the upstream tests draw them (ties are common in float16)."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=gen) * (high - low) + low).to(dtype)


# --- npu_moe_gating_top_k_softmax -----------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_gating_matches_router_without_renormalisation(dtype):
    logits = torch.randn(NUM_ROWS, E).to(dtype)
    y, expert_idx, row_idx = npu_moe_gating_top_k_softmax(logits, k=K)
    ref_w, ref_idx = mixtral_router(logits, K)
    assert y.dtype == dtype and expert_idx.dtype == row_idx.dtype == torch.int32
    assert y.shape == expert_idx.shape == row_idx.shape == (NUM_ROWS, K)
    assert_close(y, ref_w.to(dtype), "npu_moe_gating_top_k_softmax")
    assert torch.equal(expert_idx, ref_idx.int())
    assert (y.float().sum(-1) < 0.999).all(), "weights must not be renormalised"


def test_row_idx_convention():
    _, _, row_idx = npu_moe_gating_top_k_softmax(torch.randn(3, 4), k=2)
    assert row_idx.tolist() == [[0, 3], [1, 4], [2, 5]]  # row_idx[i, j] = j * num_rows + i


def test_gating_3d_and_finished_rows():
    logits = torch.randn(2, 3, E)
    finished = torch.tensor([[False, True, False], [False, False, True]])
    y, expert_idx, row_idx = npu_moe_gating_top_k_softmax(logits, finished, k=3)
    ref_w, ref_idx = mixtral_router(logits, 3)
    torch.testing.assert_close(y, ref_w)
    assert (expert_idx[finished] == E).all() and torch.equal(expert_idx[~finished], ref_idx[~finished].int())
    assert row_idx.shape == (2, 3, 3) and row_idx[1, 2, 2].item() == 2 * 6 + 5


def test_ties_keep_the_lower_expert_first():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0, 2.0]], dtype=torch.float16)
    for op in (lambda x: npu_moe_gating_top_k_softmax(x, k=4), lambda x: npu_moe_gating_top_k_softmax_v2(x, k=4),
               lambda x: npu_moe_gating_top_k_softmax_v2(x, k=4, renorm=1)):
        assert op(logits)[1].tolist() == [[1, 2, 4, 5]]


@pytest.mark.slow
@pytest.mark.parametrize("rows, k, experts, dtype", [
    (n, k, col, dtype) for (n, k, col), dtype in itertools.product(
        [(10, 2, 200), (430, 4, 1256), (520, 9, 5120), (10, 5, 5120)], [torch.float16, torch.float32])])
def test_gating_matches_golden_on_upstream_shapes(rows, k, experts, dtype):
    x = upstream_logits((rows, experts), dtype)
    finished = torch.rand(rows, generator=torch.Generator().manual_seed(1)) < 0.5
    y, expert_idx, row_idx = npu_moe_gating_top_k_softmax(x, finished, k)
    ref_y, ref_idx, ref_row = golden.gating_top_k_softmax(x, finished, k)
    assert_close(y, ref_y, "npu_moe_gating_top_k_softmax")
    assert torch.equal(expert_idx, ref_idx) and torch.equal(row_idx, ref_row)


@pytest.mark.slow
def test_float16_upstream_inputs_do_tie():
    """The case the stable order is for: float16 logits over thousands of experts repeat values."""
    x = upstream_logits((520, 5120), torch.float16)
    top = torch.sort(x.float(), -1, descending=True).values[:, :9]
    assert (top[:, 1:] == top[:, :-1]).any()


@pytest.mark.parametrize("x, k, message", [
    (torch.randn(4, E), 0, "0 < k"),
    (torch.randn(4, E), E + 1, "0 < k"),
    (torch.randn(1, 1100), 1025, "1024"),
    (torch.randn(E), 1, "2-D or 3-D"),
    (torch.randn(4, E, dtype=torch.float64), 1, "float64"),
])
def test_gating_constraints(x, k, message):
    with pytest.raises(NpuOpError, match=message):
        npu_moe_gating_top_k_softmax(x, k=k)
    with pytest.raises(NpuOpError, match=message):
        npu_moe_gating_top_k_softmax_v2(x, k=k)


def test_softmax_gating_has_no_backward():
    for op in (npu_moe_gating_top_k_softmax, npu_moe_gating_top_k_softmax_v2):
        with pytest.raises(NpuOpError, match="no backward"):
            op(torch.randn(4, E, requires_grad=True), k=2)


# --- npu_moe_gating_top_k_softmax_v2 ----------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("renorm, output_softmax", [(0, False), (0, True), (1, False), (1, True)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_v2_matches_golden(renorm, output_softmax, dtype):
    x = upstream_logits((430, 200), dtype, seed=2)
    finished = torch.rand(430, generator=torch.Generator().manual_seed(3)) < 0.3
    y, expert_idx, softmax_result = npu_moe_gating_top_k_softmax_v2(
        x, k=5, finished=finished, renorm=renorm, output_softmax=output_softmax)
    ref_y, ref_idx, ref_softmax = golden.gating_top_k_softmax_v2(x, 5, finished, renorm, output_softmax)
    assert_close(y, ref_y, "npu_moe_gating_top_k_softmax_v2")
    assert torch.equal(expert_idx, ref_idx)
    assert softmax_result.dtype == torch.float32 and softmax_result.shape == ref_softmax.shape
    torch.testing.assert_close(softmax_result, ref_softmax)


def test_v2_renorm_one_weights_sum_to_one_and_renorm_zero_matches_v1():
    x = torch.randn(2, 3, E)
    y1, idx1, _ = npu_moe_gating_top_k_softmax_v2(x, k=3, renorm=1)
    torch.testing.assert_close(y1.sum(-1), torch.ones(2, 3))
    y0, idx0, _ = npu_moe_gating_top_k_softmax_v2(x, k=3)
    v1_y, v1_idx, _ = npu_moe_gating_top_k_softmax(x, k=3)
    assert torch.equal(y0, v1_y) and torch.equal(idx0, v1_idx) and torch.equal(idx1, idx0)


def test_v2_rejects_unknown_renorm():
    with pytest.raises(NpuOpError, match="renorm must be 0"):
        npu_moe_gating_top_k_softmax_v2(torch.randn(2, E), k=2, renorm=2)


# --- npu_moe_gating_top_k ---------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("rows, dtype, k", golden.UPSTREAM_GROUPED_TOP_K)
def test_grouped_top_k_matches_golden_on_upstream_cases(rows, dtype, k):
    x = upstream_logits((rows, 256), dtype, seed=4, low=-2, high=2)
    bias = upstream_logits((256,), dtype, seed=5, low=-2, high=2)
    kwargs = dict(bias=bias, k_group=4, group_count=8, group_select_mode=1, norm_type=1)
    y, expert_idx, norm_out = npu_moe_gating_top_k(x, k, **kwargs)
    ref_y, ref_idx, _ = golden.gating_top_k(x, k, **kwargs)
    assert y.dtype == dtype and expert_idx.dtype == torch.int32 and y.shape == expert_idx.shape == (rows, k)
    assert torch.equal(expert_idx, ref_idx)
    assert_close(y, ref_y, "npu_moe_gating_top_k")
    assert norm_out.dtype == torch.float32 and norm_out.shape == (rows, 256) and norm_out.isnan().all()


@pytest.mark.parametrize("norm_type, group_select_mode, group_count, k_group, k", [
    (0, 0, 1, 1, 4), (1, 0, 1, 1, 8), (0, 1, 8, 3, 12), (1, 1, 8, 4, 16), (1, 0, 8, 2, 6), (0, 0, 4, 1, 32),
])
def test_grouped_top_k_parameter_sweep(norm_type, group_select_mode, group_count, k_group, k):
    """The parameter space vllm-ascend's test of the op walks (modes, norm types, 1 or 8 groups)."""
    x = upstream_logits((16, 128), torch.float32, seed=6, low=-2, high=2)
    bias = upstream_logits((128,), torch.float32, seed=7, low=-2, high=2)
    kwargs = dict(bias=bias, k_group=k_group, group_count=group_count, group_select_mode=group_select_mode,
                  norm_type=norm_type, out_flag=True, routed_scaling_factor=2.5)
    y, expert_idx, norm_out = npu_moe_gating_top_k(x, k, **kwargs)
    ref_y, ref_idx, ref_norm = golden.gating_top_k(x, k, **kwargs)
    assert torch.equal(expert_idx, ref_idx)
    torch.testing.assert_close(y, ref_y)
    torch.testing.assert_close(norm_out, ref_norm)


def test_grouped_top_k_picks_experts_only_from_the_best_groups():
    x = torch.zeros(1, 8)
    bias = torch.tensor([0.0, 0.0, 0.9, 0.0, 0.5, 0.5, 0.0, 0.0])  # group max prefers group 1; top-2 sum group 2
    by_max = npu_moe_gating_top_k(x, 2, bias=bias, k_group=1, group_count=4, group_select_mode=0, norm_type=1)[1]
    by_sum = npu_moe_gating_top_k(x, 2, bias=bias, k_group=1, group_count=4, group_select_mode=1, norm_type=1)[1]
    assert by_max.tolist() == [[2, 3]] and by_sum.tolist() == [[4, 5]]


def test_grouped_top_k_weights_ignore_the_bias_and_sigmoid_weights_are_renormalised():
    x = torch.randn(4, 16)
    bias = torch.linspace(-1, 1, 16)
    y, idx, _ = npu_moe_gating_top_k(x, 3, bias=bias, norm_type=1, routed_scaling_factor=1.0)
    chosen = torch.sigmoid(x).gather(-1, idx.long())
    torch.testing.assert_close(y, chosen / chosen.sum(-1, keepdim=True))
    y_soft, idx_soft, _ = npu_moe_gating_top_k(x, 3, norm_type=0)
    torch.testing.assert_close(y_soft, torch.softmax(x, -1).gather(-1, idx_soft.long()))  # softmax: not renormalised


def test_grouped_top_k_gradient_reaches_x_only():
    x = torch.randn(5, 16, requires_grad=True)
    bias = torch.randn(16, requires_grad=True)
    y, idx, _ = npu_moe_gating_top_k(x, 4, bias=bias, norm_type=1, routed_scaling_factor=1.5)
    grad = torch.randn(5, 4)
    y.backward(grad)
    x_ref = x.detach().clone().requires_grad_()
    chosen = torch.sigmoid(x_ref).gather(-1, idx.long())
    (1.5 * chosen / (chosen.sum(-1, keepdim=True) + 1e-20)).backward(grad)
    torch.testing.assert_close(x.grad, x_ref.grad)
    assert bias.grad is None


@pytest.mark.parametrize("kwargs, message", [
    (dict(k=3, group_count=3), "divide the expert count"),
    (dict(k=3, group_count=4, k_group=5), "k_group must be in"),
    (dict(k=9, group_count=4, k_group=2), r"k must be in \[1, experts / group_count \* k_group = 8\]"),
    (dict(k=2, renorm=1), "only renorm=0"),
    (dict(k=2, norm_type=2), "norm_type must be 0"),
    (dict(k=2, group_select_mode=2), "group_select_mode must be 0"),
    (dict(k=2, group_count=16, group_select_mode=1), "more than group_select_mode=1"),
    (dict(k=2, bias=torch.zeros(8)), "bias must be 1-D with 16"),
    (dict(k=2, bias=torch.zeros(16, dtype=torch.float16)), "share one dtype"),
    (dict(k=2, input_ids=torch.zeros(4, dtype=torch.int64)), "not emulated"),
])
def test_grouped_top_k_constraints(kwargs, message):
    with pytest.raises(NpuOpError, match=message):
        npu_moe_gating_top_k(torch.randn(4, 16), **kwargs)


def test_grouped_top_k_expert_limit():
    with pytest.raises(NpuOpError, match="at most 2048 experts"):
        npu_moe_gating_top_k(torch.randn(2, 4096), 2)
