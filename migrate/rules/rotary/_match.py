"""Rotary position embedding in the dataflow view: the forms ``npu_rotary_mul`` computes.

Spellings of the pieces (slices, ``chunk``, ``split``, ``unbind``, ``reshape(..., -1, 2)``,
``flatten(-2)``) are the view's business (``view.normal``: ``channels``, ``unflatten``, ``flatten``), and
helpers (``rotate_half`` at module level, nested, one-line, a method or a static method) are
inlined by it, so this module matches four computations:

* **per-channel tables** ``x * cos + rotate(x) * sin`` (sum and products in any order), ``rotate``
  one of ``cat((-second_half, first_half), -1)`` (``'half'``: Hugging Face, NeoX, litgpt) or
  ``flatten(stack((-odd, even), -1), -2)`` (``'interleave'``: GPT-J, Cohere);
* **pair tables** (one cos and sin per rotated pair, D/2 wide): ``stack((x0*c - x1*s, x1*c + x0*s), -1)``
  over the even/odd channels (``'interleave'``, result as channel pairs: torchtune's packed
  ``[cos|sin]`` cache, ChatGLM) and ``cat((x1*c - x2*s, x2*c + x1*s), -1)`` over the halves (``'half'``);
* **complex numbers** ``view_as_real(view_as_complex(pairs) * freqs_cis)`` (Meta Llama, Mistral);
* **2x2 rotation matrices** ``[[cos, -sin], [sin, cos]]`` applied to the channel pairs (``rotary._matrix``).

Each form also reads the rotation by -θ (``x * cos - rotate(x) * sin``, ``(x0*c + x1*s, x1*c - x0*s)``):
``npu_rotary_mul`` with sin negated (``negated``); and a rotation helper that branches on a flag
between the half and the interleaved rotation gives the mode the flag chooses at run time (``switch``).

``ropes(view)`` gives every match whose result is computed in the function itself (``rotary._unread``
reads the rotary-looking code no form covers, reported with a plan and the reason).
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Tuple

import libcst as cst

from ...view.values import number
from ...view.shapes import equal
from ...view import Value
from ...view.ops import Op
from ...view.spellings import FUNCTIONS
from ._matrix import matrix_form
from ._rope import (COMPLEX, FULL, HALF, INTERLEAVE, MATRIX_PAIRS_OPS, PAIRS, ROTATION_OPS, Rope, Switch, Turn,
                    last_dim, products, readings, terms, two_items)

def _channels(value: Optional[Value], part: str) -> Optional[Value]:
    return value if value is not None and value.op == Op.CHANNELS and value.name == part else None


def _rank(*ranks) -> Optional[int]:
    """4 when any part of the code reads x as a 4-D tensor, else None (any rank)."""
    return 4 if 4 in ranks else None


def rotation(value: Value) -> Optional[Turn]:
    """x rotated, when ``value`` is: ``cat((-second_half, first_half), -1)`` is 'half',
    ``flatten(stack((-odd, even), -1), -2)`` 'interleave'; with the other sign
    (``cat((second_half, -first_half), -1)``) ``negated``; either one chosen by a flag (``switch``)."""
    if value.op == Op.PHI:
        return _switched(value)
    if value.op == Op.CAT:
        parts, dim = two_items(value, "tensors"), last_dim(value)
        found = signed(parts, "second_half", "first_half") if dim is not None else None
        if found is not None:
            (second, first), negated = found
            return Turn(first.input, HALF, _rank(dim, second.number, first.number), negated)
    if value.op == Op.FLATTEN and value.input is not None and value.input.op == Op.STACK:
        start, end = number(value["start_dim"]), number(value["end_dim"])
        parts, dim = two_items(value.input, "tensors"), last_dim(value.input, stack=True)
        if dim is None or start not in (-2, 3) or end not in (None, -1):
            return None
        found = signed(parts, "odd", "even")
        if found is not None:
            (odd, even), negated = found
            return Turn(even.input, INTERLEAVE, _rank(4 if start == 3 else 0, odd.number, even.number), negated)
    return None


def flag_of(test: Optional[Value]) -> Tuple[Optional[Value], bool]:
    """(the flag, inverted) of a branch's test: ``interleaved`` is (interleaved, False), ``not interleaved``
    (interleaved, True)."""
    inverted = False
    while test is not None and test.op == Op.OPAQUE and isinstance(test.node, cst.UnaryOperation) \
            and isinstance(test.node.operator, cst.Not):
        test, inverted = test.input, not inverted
    return test, inverted


def _switched(phi: Value) -> Optional[Turn]:
    """The rotation a branch chooses (``if not interleaved: return <half> else: return <pairs>``): the
    branch taken when its test is a constant (``interleaved=False`` passed or defaulted), else both
    branches rotating one x with one sign, the mode chosen by the flag at run time."""
    flag, inverted = flag_of(phi["test"])
    if flag is not None and flag.op == Op.CONST and flag.name != "...":
        branch = phi["then"] if (flag.number not in (None, 0.0)) != inverted else phi["else"]
        return rotation(branch) if branch is not None else None
    then, other = (rotation(phi[k]) if phi[k] is not None else None for k in ("then", "else"))
    if flag is None or then is None or other is None or then.switch is not None or other.switch is not None \
            or not equal(then.x, other.x) or then.negated != other.negated:
        return None
    rank = _rank(then.rank, other.rank)
    if then.mode == other.mode:
        return Turn(then.x, then.mode, rank, then.negated)
    truthy, falsy = (other, then) if inverted else (then, other)
    return Turn(then.x, falsy.mode, rank, then.negated, Switch(flag, truthy.mode, falsy.mode))


def signed(parts, moved: str, kept: str):
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


def full_form(value: Value) -> Optional[Rope]:
    """``x * cos + rotate(x) * sin`` (or ``- rotate(x) * sin``: the other sign), sum and products in any
    order; x and the rotation may be cast alike (``x.float() * cos + rotate_half(x).float() * sin``: a cast
    commutes with the rotation)."""
    found = terms(value) if value.op in (Op.ADD, Op.SUB) else None
    if found is None or len(found) != 2:
        return None
    for plain, rotated in ((found[0], found[1]), (found[1], found[0])):
        if plain[0] != 1:
            continue
        for x, cos in readings(plain):
            for turned, sin in readings(rotated):
                turn = _rotation_of(turned, x)
                if turn is not None:
                    return Rope(value, x, cos, sin, turn.mode, FULL, rank=turn.rank,
                                negated=turn.negated != (rotated[0] == -1), switch=turn.switch)
    return None


def _rotation_of(turned: Optional[Value], x: Optional[Value]) -> Optional[Turn]:
    """The rotation ``turned`` is of ``x`` (both may be cast alike), or None."""
    if turned is None or x is None:
        return None
    turn = rotation(turned)
    if turn is None and turned.op == Op.CAST and x.op == Op.CAST and equal(turned["dtype"], x["dtype"]) \
            and equal(turned["other"], x["other"]):
        turn = rotation(turned.input)
        return turn if turn is not None and equal(turn.x, x.input) else None
    return turn if turn is not None and equal(turn.x, x) else None


def _has_terms(found: List[Tuple[int, Value, Value]], *wanted: Tuple[int, Value, Value]) -> bool:
    """``found`` is exactly the ``wanted`` signed products (in any order, factors in any order)."""
    if len(found) != len(wanted):
        return False
    left = list(found)
    for sign, p, q in wanted:
        match = next((t for t in left if t[0] == sign and any(equal(a, p) and equal(b, q) for a, b in readings(t))),
                     None)
        if match is None:
            return False
        left.remove(match)
    return True


def pair_form(value: Value) -> Optional[Rope]:
    """``stack((x0*c - x1*s, x1*c + x0*s), -1)`` over even/odd channels ('interleave', channel pairs
    out), ``cat(...)`` of the same over the two halves ('half') or over even/odd channels
    ('interleave' written out as halves: DeepSeek's ``split``); with the other sign
    (``x0*c + x1*s, x1*c - x0*s``: a rotation by -θ) ``negated``. Sums and products in any order."""
    if value.op not in (Op.STACK, Op.CAT):
        return None
    parts, dim = two_items(value, "tensors"), last_dim(value, stack=value.op == Op.STACK)
    if parts is None or dim is None:
        return None
    first, second = terms(parts[0]), terms(parts[1])
    if first is None or second is None or len(first) != 2:
        return None
    for lead, other in ((first[0], first[1]), (first[1], first[0])):
        if lead[0] != 1:
            continue
        for x0, c in readings(lead):
            for x1, s in readings(other):
                if not all(v is not None and v.op == Op.CHANNELS for v in (x0, x1)) or not equal(x0.input, x1.input):
                    continue
                if not _has_terms(second, (1, x1, c), (-other[0], x0, s)):
                    continue
                negated, tables = other[0] == 1, (c, s)
                even_odd = (x0.name, x1.name) == ("even", "odd")
                if value.op == Op.STACK and even_odd:
                    return Rope(value, x0.input, *tables, INTERLEAVE, PAIRS, paired=True,
                                rank=_rank(x0.number, x1.number), pairs=x0["pairs"], negated=negated)
                if value.op == Op.CAT and (even_odd or (x0.name, x1.name) == ("first_half", "second_half")):
                    return Rope(value, x0.input, *tables, INTERLEAVE if even_odd else HALF, PAIRS, split=even_odd,
                                rank=_rank(dim, x0.number, x1.number), negated=negated)
    return None


def complex_form(value: Value) -> Optional[Rope]:
    """``view_as_real(z * freqs_cis)`` with ``z = view_as_complex(...)`` (either order)."""
    if value.op != Op.VIEW_AS_REAL or value.input is None or value.input.op != Op.MUL:
        return None
    for z, freqs in products(value.input):
        if z is not None and z.op == Op.VIEW_AS_COMPLEX:
            return Rope(value, z, freqs, None, INTERLEAVE, COMPLEX, paired=True)
    return None


FORMS = (full_form, pair_form, complex_form, matrix_form)


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


def may_rotate(words, function, helpers: Iterable[str]) -> bool:
    """Whether ``function`` (a ``triage.Function`` with the functions it calls) of a module with these
    ``triage.Words`` may compute a rotation this module (or the residual pass) matches: a product,
    and a rotation op or a helper whose name says it rotates (among ``helpers``)."""
    from ...triage import may_compute

    def computes(op: str) -> bool:  # spelled by its name, or by a local name bound to one of its functions
        named = function.may_compute(op) or bool(function.names & words.may_denote(
            [q for q, spec in FUNCTIONS.items() if spec[0] == op]))
        return named and may_compute(words, op)

    if computes("einsum") or computes("matmul") and computes("unsqueeze"):  # a 2x2 table applied (``_matrix``)
        return True
    if not computes("mul"):
        return False
    return any(rotation_name_text(name) for name in function.names & set(helpers)) or \
        any(computes(op) for op in ROTATION_OPS) or any(computes(op) for op in MATRIX_PAIRS_OPS)


def rotation_name_text(name: str) -> bool:
    return "rot" in name.rsplit(".", 1)[-1].lower()
