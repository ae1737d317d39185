"""Gated MLPs on the dataflow view: ``act(gate) * up``, in any order and over any statements,
where gate and up are either two projections of one input (``self.gate_proj(x)``,
``self.up_proj(x)``; ``F.linear``/``einsum``/``@`` with two weights) or the two halves of one
projection split in two (``gate, up = self.gate_up_proj(x).chunk(2, dim=-1)``).

``gated_in(view)`` reads every product of the function once and returns a ``Gated`` match per
gated MLP, or a ``Refusal`` one (with its reason and plan) for a gated MLP the fused kernels cannot
express exactly. A product that is not a gated MLP (``x * F.silu(z)`` of unrelated tensors) is
neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

import libcst as cst

from ...refusal import Refusal, RefusalKind, blocked
from ...view.values import number, same_value
from ...view import Value, View
from ....opmap import plan
from ...view.ops import Op

#: the view's ops for activations, and the kind each is
ACTIVATIONS = {Op.SILU: "silu", Op.GELU: "gelu", Op.ACT: "runtime", Op.RELU: "relu"}  # (sigmoid gates: not GLUs)
#: ops that project a tensor with a weight that is not a module attribute
TENSOR_PROJECTIONS = ("linear", "matmul", "einsum")

GEGLU_PLAN = plan("mlp.geglu_split")
SPLIT_PLAN = plan("mlp.split_dim")
STACK_PLAN = plan("mlp.stacked")
CLIPPED_PLAN = plan("mlp.clipped")
KERNEL_PLAN = plan("mlp.no_kernel")


@dataclass
class Gated:
    product: Value
    act: Value  # the activation's value (a call of the activation)
    kind: str  # "silu" (proven), "gelu" (proven), "runtime" (an activation module known at run time)
    # "projections" (two module calls on one input), "halves" (chunk(2)), "tensors" (two weights), "operands"
    # (gate and up as the code computes them from such a pair: scaled, or halves in the other order)
    form: str
    gate: Value  # the activation's input
    up: Value
    source: Optional[Value] = None  # projections: the shared input; halves: the split tensor
    modules: Tuple[Optional[Value], Optional[Value]] = (None, None)  # projections: gate and up modules
    cast: Optional[Value] = None  # halves: both halves cast to this dtype (``gate.float()``, ``up.float()``)
    weights: Tuple[Optional[Value], Optional[Value]] = (None, None)  # tensors: the gate and up weights
    equation: Optional[str] = None  # tensors: the einsum equation (None: matmul)
    dim: int = -1  # tensors: the weight axis that becomes the output's last
    second: bool = False  # halves: the second half is the gate (``up, gate = t.chunk(2, dim=-1)``)
    scales: str = ""  # operands: what is scaled ("halves" or "projections": the form of the pair unscaled)


Match = Union[Gated, Refusal]


def gated_in(view: View) -> List[Match]:
    """Every gated MLP of the function (memoised on the view)."""
    found = getattr(view, "_gated", None)
    if found is None:
        found, seen = [], set()
        for value in list(view.values.values()):
            if value.op == Op.MUL and view.home(value) and id(value) not in seen:
                seen.add(id(value))
                match = _product(value)
                if match is not None:
                    found.append(match)
        view._gated = found
    return found


def activation(value: Value) -> Optional[Tuple[str, Value]]:
    """(kind, input) when ``value`` applies an activation to one tensor: a known activation op, or a
    module attribute (``self.act``, ``self.config.activation_func``) or a parameter called on one
    tensor (known only at run time)."""
    kind = ACTIVATIONS.get(value.op)
    if kind is not None and value.input is not None:
        return kind, value.input
    if value.op == Op.CALL and set(value.kw) == {"callee", "arg0"}:
        callee = value["callee"]
        if (_self_attribute(callee, chained=True) and not _torch_module(callee)) or callee.op == Op.PARAM:
            return "runtime", value["arg0"]
    return None


def _torch_module(callee: Value) -> bool:
    """``self.<attr>`` set in ``__init__`` to a torch module the view does not read as an activation
    (``nn.LayerNorm(...)``, ``nn.Conv1d(...)``): known not to be one."""
    scope = callee.view.scope if callee.view is not None else None
    made = scope.attributes.get(callee.name) if scope is not None and callee.input.op == Op.PARAM else None
    if not isinstance(made, cst.Call) or not isinstance(made.func, (cst.Name, cst.Attribute)):
        return False
    return (scope.qualify(made.func) or "").startswith("torch.")


def _product(product: Value) -> Optional[Match]:
    for act_value, up in ((product.input, product["other"]), (product["other"], product.input)):
        found = activation(act_value) if act_value is not None and up is not None else None
        if found is None:
            continue
        kind, gate = found
        if gate.op == Op.CLAMP or up.op == Op.CLAMP:  # gpt-oss/DeepSeek-V4 style limits on gate and up
            clamped = _halves(product, act_value, kind, _unclamped(gate), _unclamped(up)) or \
                _projections(product, act_value, kind, _unclamped(gate), _unclamped(up))
            if clamped is not None:
                return blocked(product.node, "clamped SwiGLU not fused: npu_clipped_swiglu computes it, but the "
                                             "emulated NPU cannot prove the rewrite", CLIPPED_PLAN)
        match = _halves(product, act_value, kind, gate, up) or _projections(product, act_value, kind, gate, up) \
            or _scaled(product, act_value, kind, gate, up)
        if match is None:
            continue
        if isinstance(match, Gated) and kind not in ("silu", "gelu", "runtime"):
            return blocked(product.node, "ReLU-gated MLP not fused: torch_npu has no fused kernel for it", KERNEL_PLAN)
        if isinstance(match, Gated) and kind == "gelu" and match.form == "tensors":
            return blocked(product.node, "GeGLU (GELU-gated MLP) over einsum/matmul projections not fused: "
                                         "npu_geglu needs both halves in one tensor (a copy per call)", GEGLU_PLAN)
        return match
    return None


def _unclamped(value: Value) -> Value:
    return value.input if value.op == Op.CLAMP and value.input is not None else value


# -- the two halves of one projection ---------------------------------------------------------------
def _halves(product, act_value, kind, gate, up) -> Optional[Match]:
    cast = None
    if gate.op == Op.CAST and up.op == Op.CAST and _same_dtype(gate, up):
        cast, gate, up = gate, gate.input, up.input
    g, u = _half(gate), _half(up)
    if g is None or u is None or g[0] is not u[0] or {g[1], u[1]} != {0, 1}:
        return None
    (tensor, first, last_dim) = g
    if not last_dim:
        return blocked(product.node, "gated MLP not fused: the split is not along the last dim (the rule writes "
                                     "the kernels' split of the last dim)", SPLIT_PLAN)
    return Gated(product, act_value, kind, "halves", gate, up, source=tensor, cast=cast, second=first != 0)


def _half(value: Value) -> Optional[Tuple[Value, int, bool]]:
    """(the split tensor, 0 or 1, split along the last dim) for a half of ``t.chunk(2, dim)`` (also
    as the view's ``channels`` of the last dim: ``first_half``/``second_half``)."""
    if value.op == Op.CHANNELS and value.name in ("first_half", "second_half") and value.number is None:
        return value.input, ("first_half", "second_half").index(value.name), True
    if value.op == Op.ITEM and value.input is not None and value.input.op == Op.CHUNK \
            and number(value.input["chunks"]) == 2:
        return value.input.input, int(value.number) % 2, number(value.input["dim"]) == -1
    return None


def _same_dtype(a: Value, b: Value) -> bool:
    da, db = a["dtype"], b["dtype"]
    if da is None or db is None:
        return False
    if da.op == Op.NAME and db.op == Op.NAME:
        return da.name == db.name
    return same_value(da, db)


# -- two projections of one input -------------------------------------------------------------------
def _projections(product, act_value, kind, gate, up) -> Optional[Match]:
    g, u = _projection(gate), _projection(up)
    if g is None or u is None or not same_value(g[1], u[1]):
        return None
    (g_module, source), (u_module, _) = g, u
    if g_module is not None and u_module is not None:
        if g_module.name == u_module.name:
            return None  # one module applied twice is not a gated MLP
        return Gated(product, act_value, kind, "projections", gate, up, source=source, modules=(g_module, u_module))
    if g_module is None and u_module is None and gate.op == up.op and not _same_weight(gate, up):
        stacked = _stacking(gate)
        if isinstance(stacked, Refusal):
            return blocked(product.node, f"gated MLP not fused: {stacked}", STACK_PLAN)
        return Gated(product, act_value, kind, "tensors", gate, up, source=source,
                     weights=(_weight(gate), _weight(up)), equation=stacked[0], dim=stacked[1])
    return None


# -- gate and up scaled after the projection ---------------------------------------------------------
def _scaled(product, act_value, kind, gate, up) -> Optional[Match]:
    """``act(g * s) * u`` (or ``u * s``, ``s * g``, ``g / s``) where ``g`` and ``u`` are the two halves of one
    split or two projections of one input: the gate and up values go to the kernel as the code computes
    them (the helpers concatenate them: npu_swiglu/npu_geglu read [gate | up])."""
    g, u = _unscaled(gate), _unscaled(up)
    if g is gate and u is up:
        return None
    pair = _halves(product, act_value, kind, g, u) or _projections(product, act_value, kind, g, u)
    if not isinstance(pair, Gated):
        return pair
    return Gated(product, act_value, kind, "operands", gate, up, scales=pair.form)


def _unscaled(value: Value) -> Value:
    """The projection or half that ``value`` scales (``p * s``, ``s * p``, ``p / s``, repeatedly:
    ``p * s * 2.0``), else ``value``."""
    current = value
    while current.op in (Op.MUL, Op.DIV):
        sides = [s for s in ((current.input, current["other"]) if current.op == Op.MUL else (current.input,))
                 if s is not None]
        for side in sides:
            if _projection(side) is not None or _half(side) is not None:
                return side
        nested = [side for side in sides if side.op in (Op.MUL, Op.DIV)]
        if len(nested) != 1:
            break
        current = nested[0]
    return value


def _stacking(projection: Value) -> Union[Tuple[Optional[str], int], Refusal]:
    """(einsum equation or None for matmul, weight axis of the output's last dim) for stacking the
    gate and up weights so that one product gives [gate | up], or why they cannot be stacked."""
    if projection.op == Op.MATMUL:
        return None, -1
    if projection.op == Op.LINEAR:  # x @ w.T: the output's last dim is the weight's first
        return ("...k,nk->...n", 0) if projection["bias"] is None else \
            Refusal(RefusalKind.FORM, "F.linear projections with biases")
    equation = (projection["equation"].name or "").replace(" ", "") if projection["equation"] is not None else ""
    if equation.count("->") != 1 or equation.count(",") != 1:
        return Refusal(RefusalKind.FORM, "an einsum without an explicit output")
    inputs, output = equation.split("->")
    left, right = inputs.split(",")
    last = output[-1:] if output and output[-1].isalpha() else ""
    if not last or last in left or right.count(last) != 1 or "." in right:
        return Refusal(RefusalKind.FORM, "the einsum's last output dim does not come from the weight alone")
    return equation, right.index(last) - len(right)



def _projection(value: Value) -> Optional[Tuple[Optional[Value], Value]]:
    """(module, input) for ``self.proj(x)`` (an attribute called on one tensor), (None, input) for a
    projection by a weight (``F.linear(x, w)``, ``x @ w``, ``einsum("...d,df->...f", x, w)``)."""
    if value.op in (Op.LINEAR, Op.ACT) and value["module"] is not None:  # act: a module known at run time
        return value["module"], value.input
    if value.op == Op.CALL and set(value.kw) == {"callee", "arg0"} and _self_attribute(value["callee"]):
        return value["callee"], value["arg0"]
    if value.op in (Op.LINEAR, Op.MATMUL) and value.input is not None:
        return None, value.input
    if value.op == Op.EINSUM and value["*rest"] is not None and len(value["*rest"].items) == 2:
        return None, value["*rest"].items[0]
    return None


def _weight(value: Value) -> Optional[Value]:
    if value.op == Op.EINSUM:
        return value["*rest"].items[1]
    return value["weight"] if value.op == Op.LINEAR else value["other"]


def _same_weight(a: Value, b: Value) -> bool:
    wa, wb = _weight(a), _weight(b)
    if wa is None or wb is None:
        return True
    if a.op == Op.EINSUM and (a["equation"] is None or b["equation"] is None or a["equation"].name != b["equation"].name):
        return True  # two different contractions: not the two halves of one MLP
    return same_value(wa, wb) or (wa.op == wb.op == Op.ATTR and wa.name == wb.name and same_value(wa.input, wb.input))


def _self_attribute(value: Optional[Value], chained: bool = False) -> bool:
    """``self.<attr>`` (``chained``: also ``self.<attr>.<attr>...``)."""
    while chained and value is not None and value.op == Op.ATTR and value.input is not None \
            and value.input.op == Op.ATTR:
        value = value.input
    return (value is not None and value.op == Op.ATTR and value.input is not None and value.input.op == Op.PARAM
            and value.input.name == "self")
