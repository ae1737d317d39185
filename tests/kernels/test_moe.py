import pytest
import torch

from npu_migrate.kernels._checks import NpuOpError
from npu_migrate.kernels.grouped_matmul import npu_grouped_matmul
from npu_migrate.kernels.moe import npu_moe_finalize_routing, npu_moe_init_routing
from npu_migrate.kernels.moe_gating import npu_moe_gating_top_k_softmax
from tests.kernels.test_moe_gating import mixtral_router
from tests.tolerances import DTYPES, assert_close

NUM_ROWS, E, K, H = 6, 8, 2, 16


# --- npu_moe_init_routing / npu_moe_finalize_routing ----------------------------------------

def routing_inputs():
    torch.manual_seed(1)
    x = torch.randn(NUM_ROWS, H)
    _, expert_idx, row_idx = npu_moe_gating_top_k_softmax(torch.randn(NUM_ROWS, E), k=K)
    return x, row_idx, expert_idx


def test_init_routing_sorts_slots_by_expert():
    x, row_idx, expert_idx = routing_inputs()
    expanded_x, expanded_row_idx, expanded_expert_idx = npu_moe_init_routing(x, row_idx, expert_idx, NUM_ROWS)
    # reference: walk experts in order, and within one expert the flattened (row, slot) positions in order
    order = [p for e in range(E) for p in range(NUM_ROWS * K) if expert_idx.view(-1)[p] == e]
    sorted_rows = [int(row_idx.view(-1)[p]) for p in order]
    assert expanded_expert_idx.dtype == expanded_row_idx.dtype == torch.int32
    assert expanded_expert_idx.tolist() == [int(expert_idx.view(-1)[p]) for p in order]
    assert torch.equal(expanded_x, x[[r % NUM_ROWS for r in sorted_rows]])
    for dst, src in enumerate(sorted_rows):
        assert expanded_row_idx[src] == dst


def test_init_routing_active_num_truncates():
    x, row_idx, expert_idx = routing_inputs()
    full = npu_moe_init_routing(x, row_idx, expert_idx, NUM_ROWS)[0]
    part = npu_moe_init_routing(x, row_idx, expert_idx, 2)[0]
    assert part.shape == (2 * K, H) and torch.equal(part, full[: 2 * K])


def test_init_routing_wants_int32():
    x, row_idx, expert_idx = routing_inputs()
    with pytest.raises(NpuOpError, match="int32"):
        npu_moe_init_routing(x, row_idx.long(), expert_idx, NUM_ROWS)


@pytest.mark.parametrize("dtype", DTYPES)
def test_finalize_routing_formula(dtype):
    rows = torch.randn(NUM_ROWS * K, H).to(dtype)
    skip1, skip2 = torch.randn(NUM_ROWS, H).to(dtype), torch.randn(NUM_ROWS, H).to(dtype)
    bias, scales = torch.randn(E, H).to(dtype), torch.rand(NUM_ROWS, K).to(dtype)
    src_to_dst = torch.randperm(NUM_ROWS * K).int()
    experts = torch.randint(0, E, (NUM_ROWS, K), dtype=torch.int32)
    out = npu_moe_finalize_routing(rows, skip1, skip2, bias, scales, src_to_dst, experts)
    ref = torch.zeros(NUM_ROWS, H)
    for i in range(NUM_ROWS):
        ref[i] = skip1[i].float() + skip2[i].float()
        for j in range(K):
            ref[i] += scales[i, j].float() * (rows[src_to_dst[i + j * NUM_ROWS]].float() + bias[experts[i, j]].float())
    assert out.shape == (NUM_ROWS, H)
    assert_close(out, ref.to(dtype), "npu_moe_finalize_routing")


def test_finalize_routing_without_optional_inputs():
    rows = torch.randn(NUM_ROWS * K, H)
    src_to_dst = torch.arange(NUM_ROWS * K, dtype=torch.int32)
    out = npu_moe_finalize_routing(rows, None, None, None, None, src_to_dst, None, k=K)
    torch.testing.assert_close(out, rows.view(K, NUM_ROWS, H).sum(0))


@pytest.mark.parametrize("kwargs, message", [
    (dict(skip1=torch.zeros(NUM_ROWS, H)), "skip2 is None"),
    (dict(drop_pad_mode=1), "drop_pad_mode"),
    (dict(src_to_dst=torch.arange(NUM_ROWS * K)), "int32"),
    (dict(bias=torch.zeros(E, H)), "export_for_source_row"),
])
def test_finalize_routing_constraints(kwargs, message):
    args = dict(skip1=None, bias=None, src_to_dst=torch.arange(NUM_ROWS * K, dtype=torch.int32), drop_pad_mode=0)
    args.update(kwargs)
    with pytest.raises(NpuOpError, match=message):
        npu_moe_finalize_routing(torch.randn(NUM_ROWS * K, H), args["skip1"], None, args["bias"],
                                 torch.ones(NUM_ROWS, K), args["src_to_dst"], None, args["drop_pad_mode"])


def test_routing_has_no_backward():
    x, row_idx, expert_idx = routing_inputs()
    with pytest.raises(NpuOpError, match="no backward"):
        npu_moe_init_routing(x.requires_grad_(), row_idx, expert_idx, NUM_ROWS)


def test_full_moe_block_matches_per_expert_loop():
    """gating -> init_routing -> grouped_matmul -> finalize_routing == the Mixtral expert loop."""
    torch.manual_seed(2)
    x, logits = torch.randn(NUM_ROWS, H), torch.randn(NUM_ROWS, E)
    experts = [torch.nn.Linear(H, H, bias=False) for _ in range(E)]  # weight [N, K]
    with torch.no_grad():
        weights, ref_idx = mixtral_router(logits, K)
        weights = weights / weights.sum(-1, keepdim=True)  # Mixtral renormalises itself
        ref = torch.zeros(NUM_ROWS, H)
        for i in range(NUM_ROWS):
            for j in range(K):
                ref[i] += weights[i, j] * experts[ref_idx[i, j]](x[i])

        y, expert_idx, row_idx = npu_moe_gating_top_k_softmax(logits, k=K)
        y = y / y.sum(-1, keepdim=True)
        expanded_x, expanded_row_idx, expanded_expert_idx = npu_moe_init_routing(x, row_idx, expert_idx, NUM_ROWS)
        counts = torch.bincount(expanded_expert_idx.long(), minlength=E)
        w = torch.stack([e.weight.t() for e in experts])  # [E, K, N]
        out = npu_grouped_matmul([expanded_x], [w], group_list=counts, group_type=0, group_list_type=1,
                                 split_item=2)[0]
        final = npu_moe_finalize_routing(out, None, None, None, y, expanded_row_idx, expert_idx)
    torch.testing.assert_close(final, ref)
