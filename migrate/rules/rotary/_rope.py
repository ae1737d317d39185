"""The rotary family's vocabulary, shared by its matchers (``_match``, ``_matrix``) and its reasons
(``_unread``): a match (``Rope``), a rotation (``Turn``, ``Switch``), and the readers of sums of signed
products and of two-item sequences and dims."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from ...view import Value
from ...view.ops import Op
from ...view.values import number

#: every form (and every report of ``unmatched``) rotates with one of these ops, or calls a function
#: whose name says it rotates, and multiplies (the triage reads this: ``may_rotate``)
ROTATION_OPS = ("cat", "stack", "view_as_real", "view_as_complex")
#: a 2x2 table applied column by column to channel pairs (``_matrix``) makes them with one of these:
#: ``x.reshape(*x.shape[:-1], -1, 1, 2)``, ``pairs.unsqueeze(-2)``
MATRIX_PAIRS_OPS = ("reshape", "unsqueeze")
HALF, INTERLEAVE = "half", "interleave"
FULL, PAIRS, COMPLEX = "full", "pairs", "complex"


@dataclass(frozen=True)
class Switch:
    """A rotation whose mode a flag chooses at run time (``rotate_half(x, interleaved)`` branching on
    it): ``when_true`` where ``flag`` is truthy, else ``when_false``."""
    flag: Value
    when_true: str
    when_false: str


@dataclass(frozen=True)
class Turn:
    """x rotated: the mode (or the ``switch`` that chooses it), the rank the code reads x as (4 or None),
    and the sign (``negated``: the other sign, as NanoChat's ``cat((x2, -x1))``)."""
    x: Value
    mode: str
    rank: Optional[int]
    negated: bool
    switch: Optional[Switch] = None


@dataclass
class Rope:
    out: Value  # what the fused call computes
    x: Value  # the rotated tensor, [..., D] (or its channel pairs [..., D/2, 2] with ``paired``)
    cos: Value
    sin: Optional[Value]  # None for the complex form (``cos`` is freqs_cis)
    mode: str
    form: str  # FULL, PAIRS or COMPLEX
    paired: bool = False  # ``out`` is channel pairs [..., D/2, 2]
    rank: Optional[int] = None  # the code reads the last dim as dim 3: x must be 4-D
    pairs: Optional[Value] = None  # x's channel pairs, when the code split x into them (an operand alternative)
    negated: bool = False  # the other sign (NanoChat's cat((x2, -x1)), a rotation by -θ): sin is negated
    split: bool = False  # pair tables over even/odd channels, written out as halves (DeepSeek)
    switch: Optional[Switch] = None  # the mode is chosen at run time by a flag


def two_items(value: Value, key: str) -> Optional[Tuple[Value, Value]]:
    seq = value[key] or value["axis"]
    return seq.items if seq is not None and seq.op == Op.TUPLE and len(seq.items) == 2 else None


def last_dim(value: Value, key: str = "dim", stack: bool = False) -> Optional[int]:
    """The rank x must have when the op runs on x's last dim: 0 (any) for -1, 4 for dim 3 (the last
    of 4 dims; not for a stack, which adds a dim); None when it runs on another dim."""
    dim = number(value[key] if value[key] is not None else value["axis"])
    return {-1.0: 0, 3.0: None if stack else 4}.get(dim)


def products(value: Value) -> List[Tuple[Value, Value]]:
    """Both readings (a, b) of a product ``a * b``."""
    if value is None or value.op != Op.MUL:
        return []
    return [(value.input, value["other"]), (value["other"], value.input)]


def terms(value: Optional[Value], depth: int = 0) -> Optional[List[Tuple[int, Value, Value]]]:
    """``value`` as a sum of signed products, [(sign, a, b)] for ``Σ sign·a·b`` (``a*c - b*s``,
    ``-a*s + b*c``, ``a*c + (-b)*s``), or None when it is not one."""
    if value is None or depth > 6:
        return None
    if value.op in (Op.ADD, Op.SUB):
        left, right = terms(value.input, depth + 1), terms(value["other"], depth + 1)
        if left is None or right is None:
            return None
        return left + [(-sign if value.op == Op.SUB else sign, a, b) for sign, a, b in right]
    if value.op == Op.NEG:
        inner = terms(value.input, depth + 1)
        return None if inner is None else [(-sign, a, b) for sign, a, b in inner]
    if value.op == Op.MUL:
        sign, factors = 1, []
        for factor in (value.input, value["other"]):
            while factor is not None and factor.op == Op.NEG:
                factor, sign = factor.input, -sign
            factors.append(factor)
        return [(sign, *factors)]
    return None


def readings(term: Tuple[int, Value, Value]) -> List[Tuple[Value, Value]]:
    """Both readings (a, b) of a term's product."""
    _, a, b = term
    return [(a, b), (b, a)]
