"""The pair rotation written with a 2x2 rotation-matrix table: ``R = [[cos, -sin], [sin, cos]]`` per
channel pair, applied to x's channel pairs ``(x0, x1)`` (``out_i = R_i0 * x0 + R_i1 * x1``), which is
the pair rotation ``(x0*cos - x1*sin, x1*cos + x0*sin)`` of ``rotary._match.pair_form``
('interleave', result as channel pairs).

The application, in the spellings code uses (Flux, diffusion and vision rotary code):

* elementwise on the matrix's columns: ``R[..., 0] * xp[..., 0] + R[..., 1] * xp[..., 1]`` with
  ``xp = x.reshape(*x.shape[:-1], -1, 1, 2)`` (or ``pairs.unsqueeze(-2)``);
* a matrix product: ``(R @ pairs.unsqueeze(-1)).squeeze(-1)``, ``torch.einsum("...ij,...j->...i", R, pairs)``.

The table is read only where the function (or a helper the view inlines) builds it:
``torch.stack([c, -s, s, c], -1)`` made 2x2 (``.unflatten(-1, (2, 2))``, ``.view(*c.shape, 2, 2)``,
``rearrange(..., "... (i j) -> ... i j", i=2, j=2)``) or ``stack([stack([c, -s], -1), stack([s, c], -1)], -2)``.
Its entries prove it a rotation: equal diagonal entries and off-diagonal entries that are each
other's negation, whatever values ``c`` and ``s`` hold (``npu_rotary_mul`` computes
``x * r1 + rotate(x) * r2`` for any tables); ``[[c, s], [-s, c]]`` is the rotation by -θ (``negated``).
A table that is a parameter or an attribute is not proven: ``applied`` still finds the
application, and the rule reports it with that reason.
"""

from __future__ import annotations

from typing import Optional, Tuple

import libcst as cst

from ...view import Value
from ...view.ops import Op
from ...view.shapes import equal, pairs_of, same_shape
from ...view.values import number
from ._rope import INTERLEAVE, PAIRS, Rope, terms


def matrix_form(value: Value) -> Optional[Rope]:
    """The pair rotation ``value`` computes through a 2x2 rotation-matrix table built in view, or None."""
    found = applied(value)
    entries = matrix_entries(found[0]) if found is not None else None
    if entries is None:
        return None
    cos, sin, negated = entries
    return Rope(value, found[1], cos, sin, INTERLEAVE, PAIRS, paired=True, negated=negated)


def applied(value: Value) -> Optional[Tuple[Value, Value, Optional[cst.CSTNode]]]:
    """(the matrix, x, the matrix's source as the application reads it) when ``value`` applies a
    [..., 2, 2] matrix to x's channel pairs, giving [..., D/2, 2]: by columns, by ``@`` or by
    ``einsum``; else None."""
    if value.op in (Op.ADD, Op.SUB):
        return _by_columns(value)
    if value.op == Op.SQUEEZE and number(value["dim"]) == -1 and value.input is not None \
            and value.input.op == Op.MATMUL and value.input.name is None:
        product = value.input
        column = product["other"]
        if column is not None and column.op == Op.UNSQUEEZE and number(column["dim"]) == -1:
            x = pairs_of(column.input)
            left = product.node.left if isinstance(product.node, cst.BinaryOperation) else None
            return (product.input, x, left) if x is not None else None
    if value.op == Op.EINSUM and _matrix_equation(value["equation"]):
        operands = value["*rest"].items if value["*rest"] is not None else ()
        x = pairs_of(operands[1]) if len(operands) == 2 else None
        return (operands[0], x, value.node.args[1].value if isinstance(value.node, cst.Call) else None) \
            if x is not None else None
    return None


def _matrix_equation(equation: Optional[Value]) -> bool:
    """``"...ij,...j->...i"`` (any two letters): a matrix applied to a vector, batched."""
    text = (equation.name or "").replace(" ", "") if equation is not None and equation.op == Op.STR else ""
    if text.count("->") != 1 or text.count(",") != 1:
        return False
    (matrix, vector), out = text.split("->")[0].split(","), text.split("->")[1]
    return len(matrix) == 5 and matrix[:3] == vector[:3] == out[:3] == "..." and matrix[3] != matrix[4] \
        and vector[3:] == matrix[4] and out[3:] == matrix[3]


def _by_columns(value: Value) -> Optional[Tuple[Value, Value, Optional[cst.CSTNode]]]:
    """``R[..., 0] * xp[..., 0] + R[..., 1] * xp[..., 1]`` (terms and factors in any order), ``xp`` x's
    channel pairs with a unit dim before them ([..., D/2, 1, 2]): each column of R times one channel."""
    found = terms(value)
    if found is None or len(found) != 2 or any(sign != 1 for sign, _, _ in found):
        return None
    columns = {}
    for _, a, b in found:
        for column, channel in ((a, b), (b, a)):
            if _column(column) is not None and _column(channel) is not None and column.name == channel.name \
                    and _unit_pairs(channel["pairs"]) is not None:
                columns[column.name] = (column["pairs"], channel["pairs"], column.node)
                break
    if set(columns) != {"even", "odd"}:
        return None
    (matrix, xp, node), (other_matrix, other_xp, _) = columns["even"], columns["odd"]
    if not (equal(matrix, other_matrix) and equal(xp, other_xp)):
        return None
    return matrix, _unit_pairs(xp), node.value if isinstance(node, cst.Subscript) else None


def _column(value: Optional[Value]) -> Optional[Value]:
    """``t[..., 0]`` / ``t[..., 1]`` of a tensor whose last dim is 2 (the view reads them as its even and
    odd channels, ``pairs`` = t): t, or None."""
    if value is None or value.op != Op.CHANNELS or value.name not in ("even", "odd") or value.number is not None:
        return None
    return value["pairs"]


def _unit_pairs(value: Optional[Value]) -> Optional[Value]:
    """x, when ``value`` is x's channel pairs with a unit dim before them: ``x.reshape(*x.shape[:-1], -1, 1, 2)``
    or ``pairs.unsqueeze(-2)``."""
    if value is None:
        return None
    if value.op == Op.UNSQUEEZE and number(value["dim"]) == -2:
        return pairs_of(value.input)
    if value.op == Op.RESHAPE:
        shape = value["*rest"] or value["shape"]
        items = shape.items if shape is not None else ()
        if len(items) == 1 and items[0].op == Op.TUPLE:
            items = items[0].items
        if len(items) == 4 and [number(i) for i in items[1:]] == [-1, 1, 2] and _prefix_of(items[0], value.input, 1):
            return value.input
    return None


def _prefix_of(item: Value, x: Value, drop: int) -> bool:
    """``item`` is ``*x.shape[:-drop]`` (x's shape without its last ``drop`` dims)."""
    if item is None or item.op != Op.UNPACK or item.input is None or item.input.op != Op.GETITEM:
        return False
    shape = item.input.input
    parts = [k for k in item.input.kw if k != "input"]
    return shape is not None and shape.op == Op.ATTR and shape.name == "shape" and same_shape(shape.input, x) \
        and parts == ["upper0", "slice0"] and number(item.input["upper0"]) == -drop


def matrix_entries(matrix: Optional[Value]) -> Optional[Tuple[Value, Value, bool]]:
    """(cos, sin, negated) when ``matrix`` is built here as ``[[cos, -sin], [sin, cos]]`` (``negated``:
    ``[[cos, sin], [-sin, cos]]``), else None."""
    entries = entries_of(matrix)
    if entries is None:
        return None
    c, upper, lower, c2 = entries
    if not equal(c, c2):
        return None
    if upper is not None and upper.op == Op.NEG and equal(upper.input, lower):
        return c, lower, False
    if lower is not None and lower.op == Op.NEG and equal(lower.input, upper):
        return c, upper, True
    return None


def entries_of(matrix: Optional[Value]):
    """R[0, 0], R[0, 1], R[1, 0], R[1, 1] of a [..., 2, 2] table the code builds from four entries."""
    if matrix is None:
        return None
    if matrix.op == Op.STACK and number(matrix["dim"]) == -2:  # rows stacked: stack([stack([c, -s], -1), ...], -2)
        rows = _stacked(matrix, 2, -2)
        inner = [_stacked(row, 2, -1) for row in rows] if rows is not None else None
        return (*inner[0], *inner[1]) if inner is not None and None not in inner else None
    flat = None
    if matrix.op == Op.UNFLATTEN and number(matrix["dim"]) == -1 and matrix["sizes"] is not None:
        sizes = [number(s) for s in matrix["sizes"].items]
        flat = matrix.input if sizes in ([2, 2], [-1, 2], [2, -1]) else None
    elif matrix.op == Op.RESHAPE:
        shape = matrix["*rest"] or matrix["shape"]
        items = shape.items if shape is not None else ()
        if len(items) == 1 and items[0].op == Op.TUPLE:
            items = items[0].items
        if len(items) == 3 and [number(i) for i in items[1:]] == [2, 2]:
            flat = matrix.input  # checked below: the leading dims are the entries' shape
            entries = _stacked(flat, 4, -1)
            lead = items[0]
            whole = lead.input if lead is not None and lead.op == Op.UNPACK else None
            of_entries = whole is not None and whole.op == Op.ATTR and whole.name == "shape" and entries is not None \
                and any(equal(whole.input, t) for e in entries for t in _same_shape_sources(e))
            if not (of_entries or _prefix_of(lead, flat, 1)):
                return None
    return _stacked(flat, 4, -1) if flat is not None else None


def _same_shape_sources(entry: Value):
    """Tensors of the entry's shape it is computed from elementwise: itself, ``-t``, ``cos(t)``, ``sin(t)``."""
    yield entry
    while entry is not None and entry.op in (Op.NEG, Op.COS, Op.SIN, Op.CAST, Op.SAME):
        entry = entry.input
        yield entry


def _stacked(value: Optional[Value], count: int, dim: int):
    """The ``count`` tensors ``torch.stack(..., dim)`` stacks, or None."""
    if value is None or value.op != Op.STACK or number(value["dim"]) != dim or value["tensors"] is None:
        return None
    items = value["tensors"].items
    return items if len(items) == count and all(i.op != Op.UNPACK for i in items) else None
