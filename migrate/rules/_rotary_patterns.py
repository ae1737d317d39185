"""Recognising rotary position embedding code: the rotation of the last dim, and the sum
``x * cos + rotate(x) * sin`` that applies it.

A rotation is recognised by evaluating its expressions symbolically, in terms of the rotated
tensor ``x``: slices and chunks give its halves or its even/odd channels, ``-`` negates,
``torch.cat``/``torch.stack`` and ``.flatten(-2)`` combine. Two results are rotations:

* ``cat(-second_half, first_half)`` on the last dim: ``'half'`` (Hugging Face ``rotate_half``);
* ``stack(-odd, even)`` on a new last dim, flattened back: ``'interleave'`` (GPT-J
  ``rotate_every_two``, Cohere's ``rotate_half``).

Everything else (another sign, another dim, an odd split) evaluates to ``None``: not a rotation.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence, Tuple

import libcst as cst
import libcst.matchers as m

from npu_migrate.migrate.rules._syntax import arg
from npu_migrate.migrate.rules._dataflow import docstring_count, number
from npu_migrate.migrate.rules._table import dotted

HALF, INTERLEAVE = "half", "interleave"

X = ("x",)
FIRST, SECOND = ("first",), ("second",)  # halves of the last dim
EVEN, ODD = ("even",), ("odd",)  # channels 0, 2, 4, ... and 1, 3, 5, ...
HALF_DIM = ("half_dim",)  # x.shape[-1] // 2
ROTATIONS = {
    ("cat", ("neg", SECOND), FIRST): HALF,
    ("flatten", ("stack", ("neg", ODD), EVEN)): INTERLEAVE,
}

Qualify = Callable[[cst.CSTNode], Optional[str]]


def whole(node: Optional[cst.BaseExpression]) -> Optional[int]:
    """The value of an integer literal (``2``, ``-1``); a float is no index."""
    if m.matches(node, m.Integer() | m.UnaryOperation(operator=m.Minus(), expression=m.Integer())):
        return int(number(node))
    return None


class Evaluator:
    """Symbolic values of expressions over one tensor ``x`` (see the module docstring).

    ``base`` is the expression that stands for ``x`` (inline rotations); in a helper function the
    parameter is bound to ``X`` in ``env`` instead.
    """

    def __init__(self, qualify: Qualify, env: Optional[Dict[str, tuple]] = None,
                 base: Optional[cst.BaseExpression] = None) -> None:
        self.qualify = qualify
        self.env = dict(env or {})
        self.base = base

    def value(self, node: cst.CSTNode) -> Optional[tuple]:
        if self.base is not None and node.deep_equals(self.base):
            return X
        if isinstance(node, cst.Name):
            return self.env.get(node.value)
        if m.matches(node, m.UnaryOperation(operator=m.Minus())):
            inner = self.value(node.expression)
            return ("neg", inner) if inner is not None else None
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.FloorDivide):
            return HALF_DIM if self._last_dim_size(node.left) and whole(node.right) == 2 else None
        if isinstance(node, cst.Subscript):
            return self._slice(node)
        if isinstance(node, cst.Call):
            return self._call(node)
        return None

    # -- pieces of x ----------------------------------------------------------------------------
    def _last_dim_size(self, node: cst.CSTNode) -> bool:
        """``x.shape[-1]`` or ``x.size(-1)``."""
        if m.matches(node, m.Subscript(value=m.Attribute(attr=m.Name("shape")))) and len(node.slice) == 1:
            index = node.slice[0].slice
            return isinstance(index, cst.Index) and whole(index.value) == -1 and self.value(node.value.value) == X
        if m.matches(node, m.Call(func=m.Attribute(attr=m.Name("size")))):
            return self.value(node.func.value) == X and whole(arg(node, 0, "dim")) == -1
        return False

    def _slice(self, node: cst.Subscript) -> Optional[tuple]:
        """A slice of x's last dim: ``x[..., s]``, or ``x[:, :, :, s]`` (the last dim of a 4-D x;
        the fused kernel takes 4-D tensors only, which its guard checks)."""
        if self.value(node.value) != X:
            return None
        *lead, last = [element.slice for element in node.slice]
        full = m.Slice(lower=None, upper=None, step=None)
        ellipsis = [m.matches(s, m.Index(value=m.Ellipsis())) for s in lead] == [True]
        if not (ellipsis or (len(lead) == 3 and all(m.matches(s, full) for s in lead))):
            return None
        if not isinstance(last, cst.Slice):
            return None
        lower = whole(last.lower) if last.lower is not None else 0
        step = whole(last.step) if last.step is not None else 1
        if last.upper is None and step == 2 and lower in (0, 1):
            return EVEN if lower == 0 else ODD
        if step == 1 and last.lower is None and last.upper is not None and self.value(last.upper) == HALF_DIM:
            return FIRST
        if step == 1 and last.upper is None and last.lower is not None and self.value(last.lower) == HALF_DIM:
            return SECOND
        return None

    def _call(self, node: cst.Call) -> Optional[tuple]:
        """``chunk``/``split`` into halves, ``cat``, ``stack``, ``flatten`` (functions or methods)."""
        name = self.qualify(node.func) if dotted(node.func) else None  # not `torch.stack(...).flatten`
        if name is not None and name.startswith("torch."):
            method, tensor, shift = name[len("torch."):], arg(node, 0, "input"), 1
            if method in ("cat", "concat", "concatenate", "stack"):
                tensor = arg(node, 0, "tensors")
        elif isinstance(node.func, cst.Attribute):
            method, tensor, shift = node.func.attr.value, node.func.value, 0
        else:
            return None
        if tensor is None:
            return None
        if method == "chunk" and whole(arg(node, shift, "chunks")) == 2:
            return self._halves(node, shift + 1, tensor)
        if method == "split" and self.value(arg(node, shift, "split_size_or_sections")
                                            or arg(node, shift, "split_size")) == HALF_DIM:
            return self._halves(node, shift + 1, tensor)
        if method in ("cat", "concat", "concatenate", "stack") and shift:
            return self._join("stack" if method == "stack" else "cat", node, tensor)
        if method == "flatten" and whole(arg(node, shift, "start_dim")) == -2:
            end = arg(node, shift + 1, "end_dim")
            inner = self.value(tensor)
            if (end is None or whole(end) == -1) and inner is not None and inner[0] == "stack":
                return ("flatten", inner)
        return None

    def _halves(self, node: cst.Call, dim_position: int, tensor: cst.BaseExpression) -> Optional[tuple]:
        if whole(arg(node, dim_position, "dim")) != -1 or self.value(tensor) != X:
            return None
        return ("tuple", FIRST, SECOND)

    def _join(self, kind: str, node: cst.Call, tensors: cst.BaseExpression) -> Optional[tuple]:
        if not isinstance(tensors, (cst.Tuple, cst.List)) or whole(arg(node, 1, "dim")) != -1:
            return None
        values = tuple(self.value(e.value) if not isinstance(e, cst.StarredElement) else None for e in tensors.elements)
        return (kind, *values) if None not in values else None

    # -- statements -----------------------------------------------------------------------------
    def run(self, body: Sequence[cst.BaseStatement]) -> Optional[tuple]:
        """The value a straight-line body returns: assignments then one ``return``."""
        body = list(body)[docstring_count(body):]
        for index, statement in enumerate(body):
            if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
                return None
            small = statement.body[0]
            if isinstance(small, cst.Return):
                return self.value(small.value) if small.value is not None and index == len(body) - 1 else None
            if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and self._bind(small.targets[0].target, small.value)):
                return None
        return None

    def _bind(self, target: cst.BaseAssignTargetExpression, value: cst.BaseExpression) -> bool:
        if isinstance(target, cst.Name):
            self.env[target.value] = self.value(value)
            return True
        if isinstance(target, (cst.Tuple, cst.List)):
            names = [e.value for e in target.elements]
            if not all(isinstance(n, cst.Name) for n in names):
                return False
            if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(names):
                values = [self.value(e.value) for e in value.elements]
            else:
                packed = self.value(value)
                if packed is None or packed[0] != "tuple" or len(packed) - 1 != len(names):
                    return False
                values = list(packed[1:])
            self.env.update({n.value: v for n, v in zip(names, values)})
            return True
        return False


def rotation_mode(function: cst.FunctionDef, qualify: Qualify) -> Optional[str]:
    """``'half'``/``'interleave'`` when ``function(x)`` returns that rotation of ``x``, else None."""
    params = function.params
    if (len(params.params) != 1 or params.posonly_params or params.kwonly_params
            or isinstance(params.star_arg, (cst.Param, cst.ParamStar)) or params.star_kwarg is not None
            or params.params[0].default is not None or function.decorators
            or not isinstance(function.body, cst.IndentedBlock)):
        return None
    env = {params.params[0].name.value: X}
    return ROTATIONS.get(Evaluator(qualify, env).run(function.body.body))


def inline_rotation_mode(node: cst.BaseExpression, x: cst.BaseExpression, qualify: Qualify) -> Optional[str]:
    """The mode of an expression that rotates ``x`` in place of a helper call."""
    return ROTATIONS.get(Evaluator(qualify, base=x).value(node))


def rope_terms(node: cst.CSTNode) -> Sequence[Tuple[cst.BaseExpression, cst.BaseExpression, cst.BaseExpression, cst.BaseExpression]]:
    """Candidate readings ``(x, cos, rotated, sin)`` of ``x * cos + rotated * sin``, in any order
    of the sum and of each product."""
    if not m.matches(node, m.BinaryOperation(operator=m.Add(), left=m.BinaryOperation(operator=m.Multiply()),
                                             right=m.BinaryOperation(operator=m.Multiply()))):
        return []
    readings = []
    for plain, rotated in ((node.left, node.right), (node.right, node.left)):
        for x, cos in ((plain.left, plain.right), (plain.right, plain.left)):
            for rot, sin in ((rotated.left, rotated.right), (rotated.right, rotated.left)):
                readings.append((x, cos, rot, sin))
    return readings
