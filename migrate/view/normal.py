"""Normalisations of the dataflow view: several computations of one op become that op.

Each rule is a small function of a freshly built value that returns the canonical value (or the
value itself); ``normalise`` applies them in order, once per value (arguments are already
normal). A canonical value keeps the source node only when that node's code denotes it (the
rewrites write operands from it); a value made up by a rule (the ``kᵀ`` of an einsum) has none.
Adding a spelling is adding one rule here:

* ``x * x``, ``x ** 2``, ``x.pow(2)``, ``torch.square(x)`` → ``square(x)``
* ``x ** -0.5``, ``1 / sqrt(x)``, ``x.pow(-0.5)`` → ``rsqrt(x)``; ``x ** 0.5`` → ``sqrt(x)``
* ``x * sigmoid(x)`` → ``silu(x)``
* ``x.transpose(-2, -1)``, ``x.transpose(2, 3)``, ``x.permute(0, 1, 3, 2)``, ``x.mT``, ``x.t()`` →
  ``transposed(x)`` (the last two dims swapped; ``transpose(2, 3)`` and the permutation read as
  such on the 4-D tensors attention uses)
* ``torch.einsum("bhqd,bhkd->bhqk", q, k)`` → ``matmul(q, transposed(k))``, ``"bhqk,bhkd->bhqd"``
  → ``matmul(p, v)`` (any batch letters; the contraction over the last dims)
* ``softmax(x - x.amax(dim, keepdim=True), dim)`` → ``softmax(x, dim)`` (the stabilising shift)
* ``x.to(x.dtype)``-like casts keep their op; ``same`` (``contiguous``, ``clone``) is looked through
* (in ``view.shapes``) ``t.topk(k)[1]``, ``t.topk(k).indices``, ``torch.max(t, -1)[0]``, ``t.chunk(2)[0]`` → ``item(t, i)``,
  the value tuple unpacking gives (``values, indices = t.topk(k)``); ``t.max(dim).values`` →
  ``amax(t, dim)``
"""

from __future__ import annotations

from typing import Callable, Tuple

import libcst as cst

from . import shapes
from .values import Value, derived, number, same_value
from .ops import Op

def _look_through(value):
    return value.input if value.op == Op.SAME and value.input is not None else value


def _square(value):
    if value.op == Op.MUL and same_value(value.input, value["other"]):
        return derived(value, Op.SQUARE, {"input": value.input})
    if value.op == Op.POW and number(value["other"] or value["exponent"]) == 2:
        return derived(value, Op.SQUARE, {"input": value.input})
    return value


def _roots(value):
    if value.op == Op.POW:
        exponent = number(value["other"] or value["exponent"])
        if exponent == -0.5:
            return derived(value, Op.RSQRT, {"input": value.input})
        if exponent == 0.5:
            return derived(value, Op.SQRT, {"input": value.input})
    if value.op == Op.DIV and value["other"] is not None and value["other"].op == Op.SQRT and number(value.input) == 1:
        return derived(value, Op.RSQRT, {"input": value["other"].input})
    return value


def _silu(value):
    if value.op == Op.MUL:
        for a, b in ((value.input, value["other"]), (value["other"], value.input)):
            if b is not None and b.op == Op.SIGMOID and same_value(a, b.input):
                return derived(value, Op.SILU, {"input": a})
    return value


LAST_TWO = ({-2, -1}, {2, 3})


def _transposed(value):
    if value.op == Op.TRANSPOSE:
        dims = {number(value["dim0"]), number(value["dim1"])}
        if dims in LAST_TWO:
            return derived(value, Op.TRANSPOSED, {"input": value.input})
    if value.op == Op.PERMUTE:
        dims = value["*rest"] or value["dims"]
        order = [number(item) for item in (dims.items if dims is not None else ())]
        if order == [0, 1, 3, 2]:
            return derived(value, Op.TRANSPOSED, {"input": value.input})
    if value.op == Op.T:
        return derived(value, Op.TRANSPOSED, {"input": value.input})
    return value


def _batched(value):
    """``torch.bmm(a, b)``, ``a.bmm(b)``: a matmul of 3-D operands, named "bmm" to keep that known;
    there ``b.transpose(1, 2)`` and ``b.permute(0, 2, 1)`` swap the last two dims."""
    node = value.node
    if value.op != Op.MATMUL or value.name is not None or not isinstance(node, cst.Call):
        return value
    func = node.func
    if (func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)) != "bmm":
        return value
    other = value["other"]
    if other is not None and other.op == Op.TRANSPOSE and {number(other["dim0"]), number(other["dim1"])} == {1, 2}:
        other = derived(other, Op.TRANSPOSED, {"input": other.input})
    elif other is not None and other.op == Op.PERMUTE:
        dims = other["*rest"] or other["dims"]
        if [number(item) for item in (dims.items if dims is not None else ())] == [0, 2, 1]:
            other = derived(other, Op.TRANSPOSED, {"input": other.input})
    return Value(Op.MATMUL, {**value.kw, "other": other}, node=node, view=value.view, name="bmm")


def _einsum(value):
    if value.op != Op.EINSUM or value["equation"] is None or value["equation"].op != Op.STR:
        return value
    operands = value["*rest"].items if value["*rest"] is not None else ()
    equation = (value["equation"].name or "").replace(" ", "")
    if len(operands) != 2 or "->" not in equation or "." in equation:
        return value
    inputs, output = equation.split("->")
    parts = inputs.split(",")
    if len(parts) != 2:
        return value
    (a, b), c = parts, output
    if len(a) < 2 or len(b) < 2 or len(a) != len(b) or len(c) != len(a) or a[:-2] != b[:-2] or c[:-2] != a[:-2]:
        return value
    i, j, out = a[-2:], b[-2:], c[-2:]
    left, right = operands
    if i[1] == j[1] and out == i[0] + j[0]:  # ...qd,...kd->...qk: q @ k^T
        transposed = derived(value, Op.TRANSPOSED, {"input": right}, same_node=False)
        return derived(value, Op.MATMUL, {"input": left, "other": transposed})
    if i[1] == j[0] and out == i[0] + j[1]:  # ...qk,...kd->...qd: p @ v
        return derived(value, Op.MATMUL, {"input": left, "other": right})
    return value


def _axis(value):
    """``x.mean(axis=-1)`` (numpy's keyword, which torch accepts) → ``x.mean(dim=-1)``."""
    if value.op == Op.MEAN and value["axis"] is not None and value["dim"] is None:
        kw = {k: v for k, v in value.kw.items() if k != "axis"}
        return derived(value, Op.MEAN, {**kw, "dim": value["axis"]})
    return value


def _shifted_softmax(value):
    """``softmax(x - x.amax(dim, keepdim=True), dim)`` → ``softmax(x, dim)``: subtracting each row's
    maximum over the softmax's own dim changes nothing (softmax subtracts it itself; a row of minus
    infinity is NaN either way)."""
    if value.op != Op.SOFTMAX or value.input is None or value.input.op != Op.SUB:
        return value
    x, shift = value.input.input, value.input["other"]
    if shift is None or shift.op != Op.AMAX or not same_value(shift.input, x) or number(shift["keepdim"]) != 1 \
            or number(shift["dim"]) is None or number(shift["dim"]) != number(value["dim"]):
        return value
    return derived(value, Op.SOFTMAX, {**value.kw, "input": x})


def _last_dim_by_rank(value):
    """``torch.cat((-x2, x1), dim=x1.ndim - 1)``, ``x.chunk(2, dim=x.dim() - 1)`` → ``dim=-1``: the last
    dim counted from the front of a tensor of the operand's rank (one of the concatenated tensors, the
    tensor a concatenated piece of the last dim is cut from, or the input itself)."""
    if value.op not in (Op.CAT, Op.CHUNK, Op.SPLIT, Op.UNBIND):
        return value
    key = "dim" if value["dim"] is not None else "axis"
    dim = value[key]
    if dim is None or dim.op != Op.SUB or number(dim["other"]) != 1 or dim.input is None:
        return value
    ranked = dim.input
    if not (ranked.op == Op.NDIM or ranked.op == Op.ATTR and ranked.name == "ndim"):
        return value
    if value.op == Op.CAT:
        tensors = value["tensors"]
        operands = [t.input if t.op == Op.NEG else t for t in (tensors.items if tensors is not None else ())]
    else:
        operands = [value.input or value["tensor"]]
    sources = [o for operand in operands if operand is not None  # a piece of x's last dim has x's rank
               for o in ((operand, operand.input) if operand.op == Op.CHANNELS else (operand,))]
    if not any(shapes.equal(ranked.input, source) for source in sources):
        return value
    return derived(value, value.op, {**value.kw, key: Value(Op.CONST, number=-1, view=value.view)})


#: The normalisations, in the order they are tried on each new value (the first that changes it
#: wins): this list is the only place that orders them. Adding a spelling is adding a function above
#: (or in ``view.shapes``) and naming it here.
NORMALISATIONS: Tuple[Callable, ...] = (
    _look_through, _square, _roots, _silu, _transposed, _batched, _einsum, _axis, _shifted_softmax,
    shapes.channels, shapes.reshaped_as, shapes.rearranged, shapes.reshaped_pairs, shapes.item,
    _last_dim_by_rank, shapes.reshaped_halves,
)


def normalise(value: Value) -> Value:
    """``value`` in its canonical form (its arguments are canonical already)."""
    for fn in NORMALISATIONS:
        new = fn(value)
        if new is not value:
            return new
    return value
