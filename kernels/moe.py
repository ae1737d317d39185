"""MoE token routing: ``npu_moe_init_routing``, ``npu_moe_finalize_routing`` (facts §2.8).

Inference only (no backward on a real NPU). Index tensors are int32. The gating ops that produce
the expert choices live in ``kernels.moe_gating``; their ``row_idx[i, j] = j * num_rows + i``
numbers the (row, slot) pairs slot by slot, and the routing ops use that convention to go from
token rows to expert-sorted rows and back.
"""

from __future__ import annotations

import torch

from ._checks import check_dtypes, check_same_dtype, dtype_name, reads_values, refuse_autograd, require
from ._common import FLOATS
from .registry import npu_op


def _require_int32(op: str, **tensors) -> None:
    for name, t in tensors.items():
        if t is not None:
            require(t.dtype == torch.int32, op, f"{name} must be int32, got {dtype_name(t.dtype)}")


@npu_op
def npu_moe_init_routing(x, row_idx, expert_idx, active_num):
    """``(expanded_x, expanded_row_idx, expanded_expert_idx)``: tokens sorted by expert.

    ``expanded_expert_idx, sorted_row_idx = stable_sort(expert_idx.flatten())`` (carrying
    ``row_idx``), ``expanded_row_idx[sorted_row_idx[i]] = i``,
    ``expanded_x[i] = x[sorted_row_idx[i] % num_rows]`` for the first ``min(num_rows, active_num) * k``.
    """
    op = "npu_moe_init_routing"
    refuse_autograd(op, x)
    check_dtypes(op, FLOATS, x=x)
    _require_int32(op, row_idx=row_idx, expert_idx=expert_idx)
    require(x.dim() == 2, op, f"x must be 2-D (num_rows, H), got {x.dim()}-D")
    num_rows = x.shape[0]
    require(
        expert_idx.dim() == 2 and expert_idx.shape[0] == num_rows and row_idx.shape == expert_idx.shape, op,
        f"row_idx {tuple(row_idx.shape)} and expert_idx {tuple(expert_idx.shape)} must both be (num_rows={num_rows}, k)",
    )
    require(isinstance(active_num, int) and active_num >= 0, op,
            f"active_num must be a non-negative int, got {active_num!r}")
    k = expert_idx.shape[1]
    flat_rows = row_idx.reshape(-1).long()
    if reads_values():
        require(
            bool(((flat_rows >= 0) & (flat_rows < num_rows * k)).all()), op,
            f"row_idx values must lie in [0, num_rows * k = {num_rows * k})",
        )
    expanded_expert_idx, order = torch.sort(expert_idx.reshape(-1), stable=True)
    sorted_rows = flat_rows[order]
    expanded_row_idx = torch.empty_like(flat_rows)
    expanded_row_idx[sorted_rows] = torch.arange(sorted_rows.numel(), device=x.device)
    active = min(active_num, num_rows) * k
    expanded_x = x[sorted_rows[:active] % num_rows]
    return expanded_x, expanded_row_idx.to(torch.int32), expanded_expert_idx.to(torch.int32)


@npu_op
def npu_moe_finalize_routing(expanded_permuted_rows, skip1, skip2, bias, scales, expanded_src_to_dst_row,
                             export_for_source_row, drop_pad_mode=0, k=1):
    """Weighted un-permute of the expert outputs, plus the skip connections:

    ``out[i] = skip1[i] + skip2[i] + sum_j scales[i, j] * (rows[src_to_dst[i + j * num_rows]] + bias[expert[i, j]])``.
    Only the dropless ``drop_pad_mode=0`` is emulated. Without ``scales`` the weights are 1 and
    ``k`` gives the slot count.
    """
    op = "npu_moe_finalize_routing"
    rows = expanded_permuted_rows
    refuse_autograd(op, rows, skip1, skip2, bias, scales)
    require(drop_pad_mode in (0, None), op, f"only drop_pad_mode=0 (dropless) is emulated, got {drop_pad_mode}")
    check_dtypes(op, FLOATS, expanded_permuted_rows=rows, skip1=skip1, skip2=skip2, bias=bias, scales=scales)
    check_same_dtype(op, expanded_permuted_rows=rows, skip1=skip1, skip2=skip2, bias=bias, scales=scales)
    _require_int32(op, expanded_src_to_dst_row=expanded_src_to_dst_row, export_for_source_row=export_for_source_row)
    require(rows.dim() == 2, op, f"expanded_permuted_rows must be 2-D (num_rows * K, H), got {rows.dim()}-D")
    require(skip2 is not None or skip1 is None, op, "when skip2 is None, skip1 must be None too")
    require(scales is not None or isinstance(k, int), op, f"k must be an int, got {k!r}")
    slots = scales.shape[1] if scales is not None else k
    require(slots > 0 and rows.shape[0] % slots == 0, op,
            f"expanded_permuted_rows has {rows.shape[0]} rows, not a multiple of K = {slots}")
    num_rows, hidden = rows.shape[0] // slots, rows.shape[1]
    require(
        tuple(expanded_src_to_dst_row.shape) == (num_rows * slots,), op,
        f"expanded_src_to_dst_row must have shape ({num_rows * slots},), got {tuple(expanded_src_to_dst_row.shape)}",
    )
    for name, t, shape in (("skip1", skip1, (num_rows, hidden)), ("skip2", skip2, (num_rows, hidden)),
                           ("scales", scales, (num_rows, slots))):
        if t is not None:
            require(tuple(t.shape) == shape, op, f"{name} must have shape {shape}, got {tuple(t.shape)}")
    # gathered[i, j] = rows[src_to_dst[i + j * num_rows]]
    gathered = rows.float()[expanded_src_to_dst_row.long()].view(slots, num_rows, hidden).transpose(0, 1)
    if bias is not None:
        require(export_for_source_row is not None, op, "bias needs export_for_source_row (the expert of each slot)")
        require(
            bias.dim() == 2 and bias.shape[1] == hidden and tuple(export_for_source_row.shape) == (num_rows, slots), op,
            f"bias must be (E, H={hidden}) and export_for_source_row ({num_rows}, {slots}); "
            f"got {tuple(bias.shape)} and {tuple(export_for_source_row.shape)}",
        )
        gathered = gathered + bias.float()[export_for_source_row.long()]
    weights = scales.float() if scales is not None else torch.ones(num_rows, slots, device=rows.device)
    out = (weights.unsqueeze(-1) * gathered).sum(dim=1)
    for skip in (skip1, skip2):
        if skip is not None:
            out = out + skip.float()
    return out.to(rows.dtype)
