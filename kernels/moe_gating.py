"""MoE gating (routers): ``npu_moe_gating_top_k_softmax``, its ``_v2`` and ``npu_moe_gating_top_k``.

Shared semantics, with their sources:

* Scores are computed in float32; ``y`` comes back in x's dtype, expert indices as int32 (facts
  §2.7; meta: ``y`` x.dtype, ``expert_idx`` int32).
* Top-k is stable: among equal scores the lower expert index comes first. The goldens of
  torch_npu's tests select with ``numpy.argsort(-scores, kind='stable')``
  (``test_npu_moe_gating_top_k_softmax.py``, ``test_npu_moe_gating_top_k.py``), which matters
  as soon as float16 scores tie; ``torch.topk`` does not promise that order.
* A row whose ``finished`` flag is True gets expert index ``num_experts`` (out of range) in every
  slot; its weights are still computed (aclnnMoeGatingTopKSoftmax(V2): "如果对应的行finished为True，
  则expert序号直接填num_expert值").

Only ``npu_moe_gating_top_k`` has a backward on a real NPU (``NpuMoeGatingTopK`` in
torch_npu_autograd_nodes.txt; its grad op takes only ``grad_y``): gradients reach x through the
scores; bias, used only to choose the experts, gets none. The two softmax ops refuse grad inputs.
"""

from __future__ import annotations

import torch

from ._checks import check_dtypes, check_same_dtype, refuse_autograd, require
from ._common import FLOATS
from .registry import Derivative, npu_op

_MAX_K = 1024
_MAX_GROUPED_EXPERTS = 2048


def stable_top_k(scores: torch.Tensor, k: int):
    """(values, indices) of the k largest scores per row, equal scores in index order."""
    values, indices = torch.sort(scores, dim=-1, descending=True, stable=True)
    return values[..., :k], indices[..., :k]


def _check_softmax_gating(op: str, x, finished, k) -> int:
    refuse_autograd(op, x)
    check_dtypes(op, FLOATS, x=x)
    require(x.dim() in (2, 3), op, f"x must be 2-D or 3-D, got {x.dim()}-D")
    num_experts = x.shape[-1]
    require(
        isinstance(k, int) and 0 < k <= num_experts and k <= _MAX_K, op,
        f"k must satisfy 0 < k <= num_experts ({num_experts}) and k <= {_MAX_K}, got {k}",
    )
    if finished is not None:
        require(finished.dtype == torch.bool, op, "finished must be a bool tensor")
        require(
            finished.shape == x.shape[:-1], op,
            f"finished shape {tuple(finished.shape)} must be x.shape[:-1] = {tuple(x.shape[:-1])}",
        )
    return num_experts


def _finish(expert_idx: torch.Tensor, finished, num_experts: int) -> torch.Tensor:
    expert_idx = expert_idx.to(torch.int32)
    if finished is not None:
        expert_idx = expert_idx.masked_fill(finished.unsqueeze(-1), num_experts)
    return expert_idx


@npu_op
def npu_moe_gating_top_k_softmax(x, finished=None, k=1):
    """``(y, expert_idx, row_idx)``: softmax over the experts, then top-k (largest first).

    No renormalisation of the k weights (facts §0(v) 16). ``row_idx[i, j] = j * num_rows + i``
    (the aclnn example: 3 rows, k=2 -> ``[[0, 3], [1, 4], [2, 5]]``). Inference only.
    """
    num_experts = _check_softmax_gating("npu_moe_gating_top_k_softmax", x, finished, k)
    y, expert_idx = stable_top_k(torch.softmax(x.float(), dim=-1), k)
    expert_idx = _finish(expert_idx, finished, num_experts)
    rows = x.numel() // num_experts
    row_idx = torch.arange(k, device=x.device) * rows + torch.arange(rows, device=x.device).unsqueeze(1)
    return y.to(x.dtype), expert_idx, row_idx.to(torch.int32).reshape(expert_idx.shape)


@npu_op
def npu_moe_gating_top_k_softmax_v2(x, *, k=1, finished=None, renorm=0, output_softmax=False):
    """``(y, expert_idx, softmax_result)`` (aclnnMoeGatingTopKSoftmaxV2, CANN 8.1-8.5):

    * ``renorm=0``: ``softmax_result = softmax(x, -1)``; ``y, expert_idx = topK(softmax_result, k)``;
    * ``renorm=1``: ``topk_out, expert_idx = topK(x, k)``; ``y = softmax(topk_out, -1)`` (the k
      weights then sum to 1).

    The third output is the float32 softmax, shaped like x, when ``renorm=0`` and
    ``output_softmax=True``, else an empty float32 [0] tensor (torch_npu's meta registration).
    Inference only (no autograd node).
    """
    op = "npu_moe_gating_top_k_softmax_v2"
    num_experts = _check_softmax_gating(op, x, finished, k)
    require(renorm in (0, 1), op, f"renorm must be 0 (softmax then top-k) or 1 (top-k then softmax), got {renorm}")
    if renorm == 0:
        probs = torch.softmax(x.float(), dim=-1)
        y, expert_idx = stable_top_k(probs, k)
        softmax_result = probs if output_softmax else probs.new_empty(0)
    else:
        logits, expert_idx = stable_top_k(x.float(), k)
        y = torch.softmax(logits, dim=-1)
        softmax_result = y.new_empty(0)
    return y.to(x.dtype), _finish(expert_idx, finished, num_experts), softmax_result


def _check_grouped(op, x, k, bias, k_group, group_count, group_select_mode, renorm, norm_type):
    check_dtypes(op, FLOATS, x=x, bias=bias)
    check_same_dtype(op, x=x, bias=bias)
    require(x.dim() == 2, op, f"x must be 2-D (rows, experts), got {x.dim()}-D")
    experts = x.shape[1]
    require(experts <= _MAX_GROUPED_EXPERTS, op, f"at most {_MAX_GROUPED_EXPERTS} experts, got {experts}")
    if bias is not None:
        require(tuple(bias.shape) == (experts,), op, f"bias must be 1-D with {experts} values, got {tuple(bias.shape)}")
    require(norm_type in (0, 1), op, f"norm_type must be 0 (softmax) or 1 (sigmoid), got {norm_type}")
    require(group_select_mode in (0, 1), op,
            f"group_select_mode must be 0 (group max) or 1 (sum of the group's top 2), got {group_select_mode}")
    require(renorm == 0, op, f"only renorm=0 (norm first, then top-k) is supported, got {renorm}")
    require(group_count > 0 and experts % group_count == 0, op,
            f"group_count ({group_count}) must be positive and divide the expert count {experts}")
    per_group = experts // group_count
    require(per_group > group_select_mode, op,
            f"each group needs more than group_select_mode={group_select_mode} experts, got {per_group}")
    require(-(-per_group // 32) * 32 * group_count <= _MAX_GROUPED_EXPERTS, op,
            f"the group size {per_group} rounded up to 32, times group_count {group_count}, must be <= {_MAX_GROUPED_EXPERTS}")
    require(1 <= k_group <= group_count, op, f"k_group must be in [1, group_count={group_count}], got {k_group}")
    require(isinstance(k, int) and 1 <= k <= per_group * k_group, op,
            f"k must be in [1, experts / group_count * k_group = {per_group * k_group}], got {k}")


def _norm(x: torch.Tensor, norm_type: int) -> torch.Tensor:
    return torch.softmax(x.float(), dim=-1) if norm_type == 0 else torch.sigmoid(x.float())


def _save(ctx, args, outputs):
    _, expert_idx, norm_out = outputs
    ctx.mark_non_differentiable(expert_idx, norm_out)
    ctx.save_for_backward(args["x"], expert_idx)
    ctx.args = {name: args[name] for name in ("renorm", "norm_type", "routed_scaling_factor", "eps")}


def _grads(ctx, grad_y, *_unused):
    x, expert_idx = ctx.saved_tensors
    x_norm = _norm(x.contiguous(), ctx.args["norm_type"])  # as the forward computed it (kernels.registry)
    return {"x": torch.ops.npu.npu_moe_gating_top_k_backward(x_norm, grad_y, expert_idx, **ctx.args).to(x.dtype)}


@npu_op(derivative=Derivative(_save, _grads))
def npu_moe_gating_top_k(x, k, *, bias=None, input_ids=None, tid2eid=None, k_group=1, group_count=1,
                         group_select_mode=0, renorm=0, norm_type=0, out_flag=False, routed_scaling_factor=1.0,
                         eps=1e-20):
    """``(y, expert_idx, norm_out)``: DeepSeek-style group-limited routing (aclnnMoeGatingTopK, CANN 8.5):

    1. ``norm = softmax(x, -1)`` (``norm_type=0``) or ``sigmoid(x)`` (``norm_type=1``), float32;
    2. selection values ``norm + bias`` (bias [E] in x's dtype, optional);
    3. when ``group_count > 1``: the experts split into ``group_count`` equal groups, each scored by
       its max (``group_select_mode=0``) or the sum of its two largest values (1); the ``k_group``
       best groups are kept and every other expert's selection value becomes -inf;
    4. ``expert_idx`` = the k experts with the largest selection values (stable);
    5. ``y = norm[expert_idx]`` (without the bias); for sigmoid scores ``y /= sum(y) + eps`` (the
       golden of torch_npu's test renormalises when ``norm_type == 1``; softmax weights are left
       as they are); then ``y *= routed_scaling_factor``; y in x's dtype.

    ``norm_out`` is float32 [rows, E] (meta): the scores ``norm`` when ``out_flag=True``; with
    ``out_flag=False`` the kernel does not write it ("false表示不输出"), emulated as NaN so that a
    caller reading it fails parity instead of passing by luck. Constraints of the aclnn page:
    E <= 2048, E divisible by group_count, 1 <= k_group <= group_count,
    1 <= k <= E / group_count * k_group, only ``renorm=0``. ``input_ids`` / ``tid2eid`` (in the
    2.14.0 schema, undocumented in the sources we have) are not emulated and raise. Differentiable
    in x (``NpuMoeGatingTopK``).
    """
    op = "npu_moe_gating_top_k"
    require(input_ids is None and tid2eid is None, op, "input_ids / tid2eid are not emulated")
    _check_grouped(op, x, k, bias, k_group, group_count, group_select_mode, renorm, norm_type)
    norm = _norm(x, norm_type)
    value = norm if bias is None else norm + bias.float()
    if group_count > 1:
        grouped = value.view(x.shape[0], group_count, -1)
        if group_select_mode == 0:
            score = grouped.amax(-1)
        else:
            score = grouped.topk(2, dim=-1).values.sum(-1)
        _, groups = stable_top_k(score, k_group)
        keep = torch.zeros_like(score, dtype=torch.bool).scatter_(1, groups, True)
        value = grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).view_as(norm)
    _, expert_idx = stable_top_k(value.detach(), k)
    y = norm.gather(-1, expert_idx)
    if norm_type == 1:
        y = y / (y.sum(-1, keepdim=True) + eps)
    y = (y * routed_scaling_factor).to(x.dtype)
    norm_out = norm if out_flag else torch.full_like(norm, float("nan"))
    return y, expert_idx.to(torch.int32), norm_out


@npu_op
def npu_moe_gating_top_k_backward(x_norm, grad_y, expertIdx, *, renorm=0, norm_type=0, routed_scaling_factor=1.0,
                                  eps=1e-20):
    """The gradient of npu_moe_gating_top_k's y with respect to x, from the scores ``x_norm``:
    through ``y = c * s / (sum(s) + eps)`` (sigmoid) or ``y = c * s`` (softmax) for the chosen
    scores s, then the sigmoid (``n * (1 - n)``) or softmax Jacobian; shaped like x_norm, in
    grad_y's dtype. The bias, which only chooses the experts, gets no gradient."""
    op = "npu_moe_gating_top_k_backward"
    require(renorm == 0, op, f"only renorm=0 is supported, got {renorm}")
    require(norm_type in (0, 1), op, f"norm_type must be 0 (softmax) or 1 (sigmoid), got {norm_type}")
    n, g = x_norm.float(), grad_y.float() * routed_scaling_factor
    idx = expertIdx.long()
    if norm_type == 1:
        chosen = n.gather(-1, idx)
        total = chosen.sum(-1, keepdim=True) + eps
        g = g / total - (g * chosen).sum(-1, keepdim=True) / total.pow(2)
    d_norm = torch.zeros_like(n).scatter_add_(-1, idx, g)
    if norm_type == 1:
        dx = d_norm * n * (1 - n)
    else:
        dx = n * (d_norm - (d_norm * n).sum(-1, keepdim=True))
    return dx.to(grad_y.dtype)
