"""Rotary position embedding in the dataflow view: the forms ``npu_rotary_mul`` computes.

Spellings of the pieces (slices, ``chunk``, ``split``, ``unbind``, ``reshape(..., -1, 2)``,
``flatten(-2)``) are the view's business (``view.normal``: ``channels``, ``unflatten``, ``flatten``), and
helpers (``rotate_half`` at module level, nested, one-line, a method or a static method) are
inlined by it, so this module matches three computations:

* **per-channel tables** ``x * cos + rotate(x) * sin`` (sum and products in any order), ``rotate``
  one of ``cat((-second_half, first_half), -1)`` (``'half'``: Hugging Face, NeoX, litgpt) or
  ``flatten(stack((-odd, even), -1), -2)`` (``'interleave'``: GPT-J, Cohere);
* **pair tables** (one cos and sin per rotated pair, D/2 wide): ``stack((x0*c - x1*s, x1*c + x0*s), -1)``
  over the even/odd channels (``'interleave'``, result as channel pairs: torchtune's packed
  ``[cos|sin]`` cache, ChatGLM) and ``cat((x1*c - x2*s, x2*c + x1*s), -1)`` over the halves (``'half'``);
* **complex numbers** ``view_as_real(view_as_complex(pairs) * freqs_cis)`` (Meta Llama, Mistral).

``ropes(view)`` gives every match whose result is computed in the function itself;
``unmatched(view)`` the rotary-looking code no form covers (reported with a plan).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, List, Optional, Tuple

import libcst as cst

from ...view.values import number
from ...view.shapes import equal
from ...view import Value
from ...view.ops import Op

#: every form (and every report of ``unmatched``) rotates with one of these ops, or calls a function
#: whose name says it rotates, and multiplies (the triage reads this: ``may_rotate``)
ROTATION_OPS = ("cat", "stack", "view_as_real", "view_as_complex")
HALF, INTERLEAVE = "half", "interleave"
FULL, PAIRS, COMPLEX = "full", "pairs", "complex"


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
    negated: bool = False  # the rotation has the other sign (NanoChat's cat((x2, -x1))): sin is negated
    split: bool = False  # pair tables over even/odd channels, written out as halves (DeepSeek)


def _two(value: Value, key: str) -> Optional[Tuple[Value, Value]]:
    seq = value[key] or value["axis"]
    return seq.items if seq is not None and seq.op == Op.TUPLE and len(seq.items) == 2 else None


def _last_dim(value: Value, key: str = "dim", stack: bool = False) -> Optional[int]:
    """The rank x must have when the op runs on x's last dim: 0 (any) for -1, 4 for dim 3 (the last
    of 4 dims; not for a stack, which adds a dim); None when it runs on another dim."""
    dim = number(value[key] if value[key] is not None else value["axis"])
    return {-1.0: 0, 3.0: None if stack else 4}.get(dim)


def _channels(value: Optional[Value], part: str) -> Optional[Value]:
    return value if value is not None and value.op == Op.CHANNELS and value.name == part else None


def _rank(*ranks) -> Optional[int]:
    """4 when any part of the code reads x as a 4-D tensor, else None (any rank)."""
    return 4 if 4 in ranks else None


def rotation(value: Value) -> Optional[Tuple[Value, str, Optional[int], bool]]:
    """(x, mode, rank, negated) when ``value`` is x rotated: ``cat((-second_half, first_half), -1)``
    is 'half', ``flatten(stack((-odd, even), -1), -2)`` 'interleave'; with the other sign
    (``cat((second_half, -first_half), -1)``) ``negated``."""
    if value.op == Op.CAT:
        parts, dim = _two(value, "tensors"), _last_dim(value)
        found = _signed(parts, "second_half", "first_half") if dim is not None else None
        if found is not None:
            (second, first), negated = found
            return first.input, HALF, _rank(dim, second.number, first.number), negated
    if value.op == Op.FLATTEN and value.input is not None and value.input.op == Op.STACK:
        start, end = number(value["start_dim"]), number(value["end_dim"])
        parts, dim = _two(value.input, "tensors"), _last_dim(value.input, stack=True)
        if dim is None or start not in (-2, 3) or end not in (None, -1):
            return None
        found = _signed(parts, "odd", "even")
        if found is not None:
            (odd, even), negated = found
            return even.input, INTERLEAVE, _rank(4 if start == 3 else 0, odd.number, even.number), negated
    return None


def _signed(parts, moved: str, kept: str):
    """((moved, kept) channels of one x, negated) for ``(-moved, kept)`` or ``(moved, -kept)``."""
    if parts is None:
        return None
    first, second = parts
    for negated, a, b in ((False, first.input if first.op == Op.NEG else None, second),
                          (True, first, second.input if second.op == Op.NEG else None)):
        a, b = _channels(a, moved), _channels(b, kept)
        if a is not None and b is not None and equal(a.input, b.input):
            return (a, b), negated
    return None


def _products(value: Value) -> List[Tuple[Value, Value]]:
    """Both readings (a, b) of a product ``a * b``."""
    if value is None or value.op != Op.MUL:
        return []
    return [(value.input, value["other"]), (value["other"], value.input)]


def full_form(value: Value) -> Optional[Rope]:
    """``x * cos + rotate(x) * sin``, sum and products in any order; x and the rotation may be cast
    alike (``x.float() * cos + rotate_half(x).float() * sin``: a cast commutes with the rotation)."""
    if value.op != Op.ADD:
        return None
    for plain, rotated in ((value.input, value["other"]), (value["other"], value.input)):
        for x, cos in _products(plain):
            for turned, sin in _products(rotated):
                found = rotation(turned)
                if found is None and turned is not None and turned.op == Op.CAST and x is not None and x.op == Op.CAST \
                        and equal(turned["dtype"], x["dtype"]) and equal(turned["other"], x["other"]):
                    found = rotation(turned.input)
                    found = found if found is not None and equal(found[0], x.input) else None
                    if found is not None:
                        return Rope(value, x, cos, sin, found[1], FULL, rank=found[2], negated=found[3])
                if found is not None and equal(found[0], x):
                    return Rope(value, x, cos, sin, found[1], FULL, rank=found[2], negated=found[3])
    return None


def _difference(value: Value, a: Value, b: Value) -> Optional[Tuple[Value, Value]]:
    """(c, s) when ``value`` is ``a * c - b * s``."""
    if value is None or value.op != Op.SUB:
        return None
    for first, c in _products(value.input):
        for second, s in _products(value["other"]):
            if equal(first, a) and equal(second, b):
                return c, s
    return None


def _sum_of(value: Value, a: Value, c: Value, b: Value, s: Value) -> bool:
    """``value`` is ``a * c + b * s`` (sum and products in any order)."""
    if value is None or value.op != Op.ADD:
        return False
    for left, right in ((value.input, value["other"]), (value["other"], value.input)):
        if any(equal(p, a) and equal(q, c) for p, q in _products(left)) and \
                any(equal(p, b) and equal(q, s) for p, q in _products(right)):
            return True
    return False


def pair_form(value: Value) -> Optional[Rope]:
    """``stack((x0*c - x1*s, x1*c + x0*s), -1)`` over even/odd channels ('interleave', channel pairs
    out), ``cat(...)`` of the same over the two halves ('half') or over even/odd channels
    ('interleave' written out as halves: DeepSeek's ``split``)."""
    if value.op not in (Op.STACK, Op.CAT):
        return None
    parts, dim = _two(value, "tensors"), _last_dim(value, stack=value.op == Op.STACK)
    if parts is None or dim is None or parts[0] is None or parts[0].op != Op.SUB:
        return None
    for first_term, _ in _products(parts[0].input):
        for second_term, _ in _products(parts[0]["other"]):
            x0, x1 = first_term, second_term
            if x0 is None or x1 is None or x0.op != Op.CHANNELS or x1.op != Op.CHANNELS or not equal(x0.input, x1.input):
                continue
            tables = _difference(parts[0], x0, x1)
            if tables is None or not _sum_of(parts[1], x1, tables[0], x0, tables[1]):
                continue
            even_odd = (x0.name, x1.name) == ("even", "odd")
            if value.op == Op.STACK and even_odd:
                return Rope(value, x0.input, *tables, INTERLEAVE, PAIRS, paired=True, rank=_rank(x0.number, x1.number),
                            pairs=x0["pairs"])
            if value.op == Op.CAT and (even_odd or (x0.name, x1.name) == ("first_half", "second_half")):
                return Rope(value, x0.input, *tables, INTERLEAVE if even_odd else HALF, PAIRS, split=even_odd,
                            rank=_rank(dim, x0.number, x1.number))
    return None


def complex_form(value: Value) -> Optional[Rope]:
    """``view_as_real(z * freqs_cis)`` with ``z = view_as_complex(...)`` (either order)."""
    if value.op != Op.VIEW_AS_REAL or value.input is None or value.input.op != Op.MUL:
        return None
    for z, freqs in _products(value.input):
        if z is not None and z.op == Op.VIEW_AS_COMPLEX:
            return Rope(value, z, freqs, None, INTERLEAVE, COMPLEX, paired=True)
    return None


FORMS = (full_form, pair_form, complex_form)


def ropes(view) -> List[Rope]:
    """Every rotary embedding computed by the function's own code (memoised on the view)."""
    found = getattr(view, "_ropes", None)
    if found is None:
        found, seen = [], set()
        for value in list(view.values.values()):
            if id(value) in seen or not view.home(value):
                continue
            seen.add(id(value))
            rope = next((r for r in (form(value) for form in FORMS) if r is not None), None)
            if rope is not None:
                found.append(rope)
        _join_pairs(view, found)
        view._ropes = found
    return found


def _join_pairs(view, found: List[Rope]) -> None:
    """A pair-table rotation whose channel pairs the same expression flattens back
    (``torch.stack(...).flatten(-2)``) is matched up to the flatten: its result is [..., D]."""
    paired = {id(r.out): r for r in found if r.form == PAIRS and r.paired}
    if not paired:
        return
    for value in list(view.values.values()):
        rope = paired.get(id(value.input)) if value.op == Op.FLATTEN and view.home(value) else None
        start, end = number(value["start_dim"]), number(value["end_dim"])
        if rope is None or start not in (-2, 3) or end not in (None, -1) or not _encloses(view, value.node, rope.out.node):
            continue
        rope.out, rope.paired, rope.rank = value, False, _rank(rope.rank, 4 if start == 3 else 0)


def _encloses(view, outer, inner) -> bool:
    node = view.parents.get(id(inner))
    while node is not None and not isinstance(node, (cst.BaseSmallStatement, cst.BaseStatement)):
        if node is outer:
            return True
        node = view.parents.get(id(node))
    return False


def unmatched(view) -> List[Tuple[Value, str]]:
    """Rotary-looking code of the function that no form covers: (value, what it is)."""
    matched = {id(r.out) for r in ropes(view)}
    found = []
    for value in {id(v): v for v in view.values.values()}.values():
        if not view.home(value) or id(value) in matched:
            continue
        if value.op == Op.VIEW_AS_REAL and _has_complex_factor(value.input):
            found.append((value, "complex"))  # a product with a complex view of x, but not x * freqs_cis
        elif value.op == Op.ADD and _calls_rotation_helper(value):
            found.append((value, "helper"))
        elif value.op == Op.ADD and _unproven_rotation(value):
            found.append((value, "rotation"))
    return found


def _unproven_rotation(value: Value) -> bool:
    """``x * cos + r * sin`` where ``r`` concatenates or stacks a negated piece, but is not proven to
    be x's half or interleaved rotation (halves sliced at ``self.head_size // 2``, another dim)."""
    for _, rotated in ((value.input, value["other"]), (value["other"], value.input)):
        for turned, _ in _products(rotated):
            while turned is not None and turned.op in (Op.CAST, Op.SAME, Op.FLATTEN, Op.RESHAPE, Op.RESHAPE_AS):
                turned = turned.input
            if turned is not None and turned.op in (Op.CAT, Op.STACK):
                parts = _two(turned, "tensors")
                if parts is not None and any(p is not None and p.op == Op.NEG for p in parts):
                    return True
    return False


def _has_complex_factor(value: Optional[Value], depth: int = 0) -> bool:
    """A product (of any length) with a ``view_as_complex`` factor."""
    if value is None or value.op != Op.MUL or depth > 4:
        return False
    return any(v is not None and (v.op == Op.VIEW_AS_COMPLEX or _has_complex_factor(v, depth + 1))
               for v in (value.input, value["other"]))


def _calls_rotation_helper(value: Value) -> bool:
    """``x * cos + f(x) * sin`` where ``f`` is a function the view cannot read whose name says it
    rotates (``rotate_half`` imported from another module)."""
    for plain, rotated in ((value.input, value["other"]), (value["other"], value.input)):
        for x, _ in _products(plain):
            for turned, _ in _products(rotated):
                while turned is not None and turned.op == Op.CAST:  # rotate_half(q).float()
                    turned, x = turned.input, x.input if x is not None and x.op == Op.CAST else x
                if turned is not None and turned.op == Op.CALL and turned["arg0"] is not None \
                        and equal(turned["arg0"], x) and _rotation_name(turned["callee"]):
                    return True
    return False


def may_rotate(words, function, helpers: Iterable[str]) -> bool:
    """Whether ``function`` (a ``triage.Function`` with the functions it calls) of a module with these
    ``triage.Words`` may compute a rotation this module (or the residual pass) matches: a product,
    and a rotation op or a helper whose name says it rotates (among ``helpers``)."""
    from ...triage import may_compute

    if not (function.may_compute("mul") and may_compute(words, "mul")):
        return False
    return any(_rotation_name_text(name) for name in function.names & set(helpers)) or \
        any(function.may_compute(op) and may_compute(words, op) for op in ROTATION_OPS)


def _rotation_name(callee: Optional[Value]) -> bool:
    """An imported or global function (not a parameter) whose name says it rotates."""
    if callee is None or callee.op not in (Op.NAME, Op.FREE):
        return False
    return _rotation_name_text(callee.name or "")


def _rotation_name_text(name: str) -> bool:
    return "rot" in name.rsplit(".", 1)[-1].lower()
