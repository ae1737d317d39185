"""MoE gating (NPU340): the routers' kernels have no backward, so they run only where nothing needs a
gradient; an MoE bias that the original's zero-filled groups compare against is checked on every
call (not negative).
"""

import torch
import torch_npu

from .core import _FLOATS, _failed, _no_grad_needed, _record


# -- MoE gating ---------------------------------------------------------------------------------------


def moe_gating_fits(logits, k, dim=-1, *, when=True, site=None):
    """``npu_moe_gating_top_k_softmax(logits, None, k)`` computes ``topk(softmax(logits, dim), k)``:
    softmax over the last dim of a 2-D/3-D float tensor, 0 < k <= min(experts, 1024), and no
    gradient needed (the kernel has no backward on a real NPU: routers in training keep the
    original code). ``site``: counted there."""
    return _record(site, _moe_gating_why(logits, k, dim), when=when)


def _moe_gating_why(logits, k, dim):
    if not torch.is_tensor(logits) or logits.dtype not in _FLOATS or logits.dim() not in (2, 3):
        return "the logits are not a 2-D/3-D float tensor"
    if dim not in (-1, logits.dim() - 1):
        return "the softmax is not over the last dim"
    if isinstance(k, bool) or not isinstance(k, int) or not 0 < k <= min(logits.shape[-1], 1024):
        return f"k={k!r} is not an int in 1..min(experts, 1024)"
    return None if _no_grad_needed(logits) else "a gradient is needed (the kernel has no backward)"


def moe_softmax_v2_fits(logits, k, dim=-1, *, when=True, site=None):
    """``moe_gating_fits`` for ``npu_moe_gating_top_k_softmax_v2``, which older torch_npu releases lack
    (the original code runs there)."""
    if not hasattr(torch_npu, "npu_moe_gating_top_k_softmax_v2"):
        return _record(site, "this torch_npu has no npu_moe_gating_top_k_softmax_v2")
    return moe_gating_fits(logits, k, dim, when=when, site=site)


#: npu_moe_gating_top_k's limits (aclnnMoeGatingTopK): at most 2048 experts, also once each group is
#: rounded up to 32 experts
MOE_MAX_EXPERTS = 2048
#: the group score of the kernel: 0 = the group's max (``top`` 1), 1 = the sum of its two largest
_GROUP_MODES = {1: 0, 2: 1}


def _int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def moe_top_k_fits(logits, k, *, bias=None, k_group=1, group_count=1, group_size=None, group_top=1, experts=None,
                   routed_scaling_factor=1.0, zero_filled=False, norm_out=False, dtype=None, when=True,
                   site=None):
    """``npu_moe_gating_top_k(logits, k, bias=..., k_group=..., group_count=...)`` computes what the
    original router does: 2-D float logits [tokens, E] with E <= 2048 (``experts``: the original
    views its scores as [-1, experts] first), E split into ``group_count`` groups of ``group_size``
    (as the original's view reads them), groups scored by their max or top-2 sum (``group_top``),
    1 <= k_group <= group_count, 1 <= k <= k_group * E / group_count, a bias [E] whose dtype the
    logits' holds (``dtype``: the dtype the kernel gets the logits in, when the code casts them; the
    call casts the bias to it, as ``scores + bias`` promotes it), a Python number as scaling factor. ``zero_filled``: the original masks the experts of the
    dropped groups to 0, not -inf, which only agrees when no kept expert scores below 0 (checked once
    per bias tensor). ``norm_out``: the original reads the scores afterwards; the kernel returns them
    without a gradient, so then nothing may need one. ``site``: counted there."""
    return _record(site, _moe_top_k_why(logits, k, bias, k_group, group_count, group_size, group_top, experts,
                                        routed_scaling_factor, zero_filled, norm_out, dtype), when=when)


def _moe_top_k_why(logits, k, bias, k_group, group_count, group_size, group_top, experts, routed_scaling_factor,
                   zero_filled, norm_out, dtype):
    if not hasattr(torch_npu, "npu_moe_gating_top_k"):  # older torch_npu releases lack it
        return "this torch_npu has no npu_moe_gating_top_k"
    if not torch.is_tensor(logits) or logits.dtype not in _FLOATS or logits.dim() != 2:
        return "the logits are not a 2-D float tensor"
    num = logits.shape[-1]
    if experts is not None and experts != num or not _int(group_count) or group_count < 1 or num % group_count:
        return f"{num} experts do not split into {group_count!r} groups (or the view's {experts!r})"
    per_group = num // group_count
    if group_size is not None and group_size not in (-1, per_group) or group_top not in _GROUP_MODES:
        return "the group size or the group score is not one the kernel takes"
    if group_count > 1 and per_group <= _GROUP_MODES[group_top]:
        return "groups too small for their score"
    if -(-per_group // 32) * 32 * group_count > MOE_MAX_EXPERTS or num > MOE_MAX_EXPERTS:
        return f"over the kernel's {MOE_MAX_EXPERTS} experts"
    if not (_int(k_group) and 1 <= k_group <= group_count and _int(k) and 1 <= k <= per_group * k_group):
        return f"k={k!r} or k_group={k_group!r} out of range"
    if isinstance(routed_scaling_factor, bool) or not isinstance(routed_scaling_factor, (int, float)):
        return "the scaling factor is not a Python number"
    want = dtype or logits.dtype  # the bias is cast to it: exact when the scores' dtype holds the bias's
    if bias is not None and not (torch.is_tensor(bias) and tuple(bias.shape) == (num,) and bias.dtype in _FLOATS
                                 and torch.promote_types(bias.dtype, want) == want and bias.device == logits.device):
        return "the bias is not a float tensor [experts] the scores' dtype holds"
    if norm_out and not _no_grad_needed(logits):
        return "the scores are read afterwards and need a gradient"
    if zero_filled and bias is not None:
        return _failed((bias,), {"a bias is negative (the dropped groups are filled with 0)": lambda: (bias >= 0).all()})
    return None
