"""``npu_grouped_matmul``: ``y_i = x_i @ weight_i (+ bias_i)`` for a list of groups, in one call.

Weights are ``[K, N]`` (or one ``[E, K, N]`` tensor), NOT ``nn.Linear``'s ``[N, K]``: pass
``linear.weight.t()``. The result is always a list. ``group_type=0`` splits one ``x`` along M by
``group_list`` (``group_list_type`` 0: cumulative ends, 1: per-group counts). ``split_item`` 0/1
returns one output per group, 2/3 one output concatenated along M. The quantised variants are
not emulated; no backward on a real NPU.

Views: the kernel computes on the values of any view, with two documented exceptions for a
``group_list`` tensor (or none), the overload whose rules the op's page tabulates
(Ascend/op-plugin ``docs/context/torch_npu-npu_grouped_matmul.md``, "group_list输入类型为Tensor时"):
"x不支持转置" (no transposed x) and "支持weight转置，但weight中每个tensor是否转置需保持统一"
(weights may be transposed, all of them or none). "Transposed" is the page's own definition: a [M, K] tensor
with strides [1, M].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._checks import NpuOpError, check_dtypes, check_same_dtype, refuse_autograd, require
from ._common import FLOATS
from .activations import fast_gelu_f32
from .registry import npu_op

_OP = "npu_grouped_matmul"
_MAX_TENSORS = 128
_ACTIVATIONS = {
    0: lambda y: y,
    1: F.relu,
    2: lambda y: F.gelu(y, approximate="tanh"),
    4: fast_gelu_f32,
    5: F.silu,
}


def _as_list(tensors, name: str) -> list:
    if tensors is None:
        return []
    items = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    require(len(items) <= _MAX_TENSORS, _OP, f"{name} holds {len(items)} tensors; at most {_MAX_TENSORS}")
    return items


def _group_sizes(group_list, group_list_type: int, groups: int, m: int) -> list:
    """Per-group row counts from ``group_list`` (a tensor, or the int list of the ``.List`` overload)."""
    if isinstance(group_list, torch.Tensor):
        require(group_list.dtype in (torch.int64, torch.int32), _OP, "group_list must be an integer (int64) tensor")
        values = [int(v) for v in group_list.reshape(-1).tolist()]
    else:
        values = [int(v) for v in group_list]
    require(len(values) == groups, _OP, f"group_list has {len(values)} entries for {groups} weights")
    require(group_list_type in (0, 1), _OP, f"group_list_type must be 0 (cumsum) or 1 (counts), got {group_list_type}")
    if group_list_type == 0:
        require(all(b >= a for a, b in zip([0] + values, values)), _OP,
                f"group_list_type=0 expects a non-decreasing cumulative list, got {values}")
        sizes = [b - a for a, b in zip([0] + values, values)]
    else:
        require(all(v >= 0 for v in values), _OP, f"group_list_type=1 expects non-negative counts, got {values}")
        sizes = values
    require(sum(sizes) <= m, _OP, f"group_list covers {sum(sizes)} rows but x has only {m}")
    return sizes


def _transposed(t: torch.Tensor) -> bool:
    """Laid out with its last two dims swapped: [M, K] with strides [1, M] (a stack: per matrix)."""
    return t.dim() >= 2 and not t.is_contiguous() and t.transpose(-1, -2).is_contiguous()


def _views(x, weight, *, group_list=None, **_unused):
    """The documented layout rules (module doc) of the group_list-tensor overload."""
    if isinstance(group_list, (list, tuple)):
        return
    for i, xi in enumerate(_as_list(x, "x")):
        require(not _transposed(xi), _OP,
                f"x[{i}] is transposed (strides {xi.stride()}); the kernel takes no transposed x (call .contiguous() first)")
    flags = {_transposed(w) for w in _as_list(weight, "weight")}
    require(len(flags) <= 1, _OP, "weight mixes transposed and untransposed tensors; the kernel takes them all "
            "transposed or none")


def _fake(x, weight, *, bias=None, scale=None, offset=None, antiquant_scale=None, antiquant_offset=None,
          per_token_scale=None, group_list=None, activation_input=None, activation_quant_scale=None,
          activation_quant_offset=None, split_item=0, group_type=None, group_list_type=0, act_type=0,
          tuning_config=None, output_dtype=None, x_dtype=None, weight_dtype=None, scale_dtype=None,
          per_token_scale_dtype=None):
    """Output shapes: N from each weight (meta: ``weight[0].shape[2]`` for one [E, K, N] tensor, else
    ``weight[i].shape[1]``); per-group row counts from a group_list tensor are data-dependent."""
    xs, ws = _as_list(x, "x"), _as_list(weight, "weight")
    if len(ws) == 1 and ws[0].dim() == 3:
        ws = list(ws[0].unbind(0))
    if group_type == 0 and group_list is not None:
        m = xs[0].shape[0]
        if split_item in (2, 3):
            return [xs[0].new_empty(m, ws[0].shape[1])]
        if isinstance(group_list, torch.Tensor):
            sizes = [torch.library.get_ctx().new_dynamic_size() for _ in ws]
        else:
            sizes = _group_sizes(group_list, group_list_type, len(ws), m)
        return [xs[0].new_empty(rows, w.shape[1]) for rows, w in zip(sizes, ws)]
    ys = [xi.new_empty(*xi.shape[:-1], wi.shape[1]) for xi, wi in zip(xs, ws)]
    if split_item in (2, 3):
        return [xs[0].new_empty(sum(y.shape[0] for y in ys), ys[0].shape[-1])]
    return ys


@npu_op(fake=_fake, views=_views)
def npu_grouped_matmul(x, weight, *, bias=None, scale=None, offset=None, antiquant_scale=None,
                       antiquant_offset=None, per_token_scale=None, group_list=None, activation_input=None,
                       activation_quant_scale=None, activation_quant_offset=None, split_item=0, group_type=None,
                       group_list_type=0, act_type=0, tuning_config=None, output_dtype=None, x_dtype=None,
                       weight_dtype=None, scale_dtype=None, per_token_scale_dtype=None):
    quant = dict(scale=scale, offset=offset, antiquant_scale=antiquant_scale, antiquant_offset=antiquant_offset,
                 per_token_scale=per_token_scale, activation_input=activation_input,
                 activation_quant_scale=activation_quant_scale, activation_quant_offset=activation_quant_offset,
                 output_dtype=output_dtype, x_dtype=x_dtype, weight_dtype=weight_dtype, scale_dtype=scale_dtype,
                 per_token_scale_dtype=per_token_scale_dtype)
    for name, value in quant.items():
        if value is not None:
            raise NpuOpError(f"{_OP}: {name} (quantised grouped matmul) is not emulated; pass None")
    xs, ws, bs = _as_list(x, "x"), _as_list(weight, "weight"), _as_list(bias, "bias")
    require(len(xs) > 0 and len(ws) > 0, _OP, "x and weight must be non-empty lists of tensors")
    refuse_autograd(_OP, *xs, *ws, *bs)
    if len(ws) == 1 and ws[0].dim() == 3:
        ws = list(ws[0].unbind(0))  # one [E, K, N] tensor = E weights
    if len(bs) == 1 and bs[0].dim() == 2 and len(ws) > 1:
        bs = list(bs[0].unbind(0))
    named = {**{f"x[{i}]": t for i, t in enumerate(xs)}, **{f"weight[{i}]": t for i, t in enumerate(ws)}}
    check_dtypes(_OP, FLOATS, **named)
    check_same_dtype(_OP, **named)
    dtype = xs[0].dtype
    for i, b in enumerate(bs):
        require(b.dtype in (dtype, torch.float32), _OP, f"bias[{i}] must be x's dtype or float32")
    require(split_item in (0, 1, 2, 3), _OP, f"split_item must be 0, 1, 2 or 3, got {split_item}")
    require(act_type in _ACTIVATIONS, _OP,
            f"act_type {act_type} is not emulated (0 none, 1 relu, 2 gelu_tanh, 4 fast_gelu, 5 silu)")

    unrouted_rows = 0  # rows of x past the last group: left unwritten by the kernel, zero here
    if group_type in (None, -1):
        require(group_list is None, _OP, "group_list needs group_type=0 (split along M)")
    elif group_type == 0:
        if group_list is not None:
            require(len(xs) == 1, _OP, "group_type=0 with group_list takes one x tensor to split along M")
            sizes = _group_sizes(group_list, group_list_type, len(ws), xs[0].shape[0])
            unrouted_rows = xs[0].shape[0] - sum(sizes)
            xs = list(xs[0][: sum(sizes)].split(sizes, dim=0))
    else:
        raise NpuOpError(f"{_OP}: group_type {group_type} is not emulated (only -1/None and 0)")
    require(len(xs) == len(ws), _OP, f"{len(xs)} x groups but {len(ws)} weights")
    require(not bs or len(bs) == len(ws), _OP, f"{len(bs)} biases for {len(ws)} weights")

    ys = []
    for i, (xi, wi) in enumerate(zip(xs, ws)):
        require(wi.dim() == 2, _OP, f"weight[{i}] must be 2-D [K, N], got {tuple(wi.shape)}")
        require(
            xi.shape[-1] == wi.shape[0], _OP,
            f"x[{i}] {tuple(xi.shape)} @ weight[{i}] {tuple(wi.shape)}: K mismatch; weights are [K, N] "
            "(an nn.Linear weight [N, K] needs .t())",
        )
        yi = xi.float() @ wi.float()
        if bs:
            require(tuple(bs[i].shape) == (wi.shape[1],), _OP, f"bias[{i}] must have shape ({wi.shape[1]},)")
            yi = yi + bs[i].float()
        ys.append(_ACTIVATIONS[act_type](yi).to(dtype))
    if split_item in (2, 3):
        if unrouted_rows:
            ys.append(ys[0].new_zeros(unrouted_rows, ys[0].shape[-1]))
        return [torch.cat(ys, dim=0)]
    return ys
