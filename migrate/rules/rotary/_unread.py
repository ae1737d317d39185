"""Rotary-looking code that no form of ``rotary._match`` covers, and why: a sum ``x * cos ± r * sin``
whose rotation ``r`` is a function the view did not read (imported from another module, or of this
file but not inlined: the view says why), or a concatenation of a negated piece not proven to be x's
half or interleaved rotation (the first step of ``_match.rotation`` that fails, naming the code), and
complex products that are not ``x * freqs_cis``. The reasons name only code the function shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from ...view import Value
from ...view.ops import Op
from ...view.shapes import equal, subscript
from ...view.syntax import code
from ...view.values import number
from ._match import flag_of, ropes, rotation, rotation_name_text, signed
from ._matrix import applied, entries_of, matrix_entries
from ._rope import last_dim, readings, terms, two_items


@dataclass(frozen=True)
class Unread:
    """Rotary-looking code no form covers: the sum (or complex view) ``value``, what it is (``kind``:
    'complex', 'helper', 'rotation' or 'matrix'), the value the reason is about (the helper's call,
    the concatenation, the 2x2 table) and the rotated x."""
    value: Value
    kind: str
    about: Optional[Value] = None
    x: Optional[Value] = None  # (for 'matrix': the table's source as the application reads it)


def unmatched(view) -> List[Unread]:
    """Rotary-looking code of the function that no form covers."""
    matched = {id(v) for r in ropes(view) for v in (r.out, r.out.input if r.out.op == Op.FLATTEN else None)}
    found = []
    for value in {id(v): v for v in view.values.values()}.values():
        if not view.home(value) or id(value) in matched:
            continue
        if value.op == Op.VIEW_AS_REAL and _has_complex_factor(value.input):
            found.append(Unread(value, "complex"))  # a product with a complex view of x, but not x * freqs_cis
        elif applied(value) is not None:  # a 2x2 table applied to channel pairs, not proven a rotation
            found.append(Unread(value, "matrix", *applied(value)[::2]))
        elif value.op in (Op.ADD, Op.SUB):
            helper = _rotation_helper_call(value)
            if helper is not None:
                found.append(Unread(value, "helper", *helper))
                continue
            rotated = _unproven_rotation(value)
            if rotated is not None:
                found.append(Unread(value, "rotation", *rotated))
    return found


def _sum_readings(value: Value):
    """(x, turned) for each reading of a two-term sum ``x * a ± turned * b``."""
    found = terms(value)
    if found is None or len(found) != 2:
        return
    for plain, rotated in ((found[0], found[1]), (found[1], found[0])):
        for x, _ in readings(plain):
            for turned, _ in readings(rotated):
                yield x, turned


def _unproven_rotation(value: Value) -> Optional[Tuple[Value, Value]]:
    """(the rotation, x) for ``x * cos + r * sin`` where ``r`` concatenates or stacks a negated piece
    (or chooses such a value by a flag), but is not proven to be x's half or interleaved rotation
    (halves sliced at ``self.head_size // 2``, another dim)."""
    candidates = [(found, x) for x, turned in _sum_readings(value) for found in [_rotation_like(turned)]
                  if found is not None]
    for found, x in candidates:  # the reading whose x is the tensor the pieces come from, if there is one
        parts = two_items(found, "tensors") if found.op != Op.PHI else None
        piece = parts[1] if parts is not None else None
        piece = piece.input if piece is not None and piece.op == Op.NEG else piece
        if piece is not None and piece.op == Op.CHANNELS and equal(piece.input, x):
            return found, x
    return candidates[0] if candidates else None


def _rotation_like(value: Optional[Value], depth: int = 0) -> Optional[Value]:
    """The concatenation or stack of a negated piece ``value`` computes (through casts and reshapes), or
    the branch (``phi``) that chooses one; None."""
    while value is not None and value.op in (Op.CAST, Op.SAME, Op.FLATTEN, Op.RESHAPE, Op.RESHAPE_AS):
        value = value.input
    if value is None or depth > 4:
        return None
    if value.op == Op.PHI:
        return value if any(_rotation_like(value[k], depth + 1) is not None for k in ("then", "else")) else None
    if value.op in (Op.CAT, Op.STACK):
        parts = two_items(value, "tensors")
        if parts is not None and any(p is not None and p.op == Op.NEG for p in parts):
            return value
    return None


def why_unproven(turned: Value, x: Optional[Value]) -> str:
    """Why ``turned`` (a concatenation or stack of a negated piece, or a branch choosing one) is not x's
    half or interleaved rotation: the first step of ``rotation`` that fails, naming the code."""
    if turned.op == Op.PHI:
        return _why_branches(turned, x)
    verb = "concatenates" if turned.op == Op.CAT else "stacks"
    dim = turned["dim"] if turned["dim"] is not None else turned["axis"]
    if last_dim(turned, stack=turned.op == Op.STACK) is None:
        where = f"dim {_quoted(dim)}" if dim is not None else "dim 0 (no dim given)"
        return f"it {verb} on {where}, which is not proven to be the last dim"
    parts = two_items(turned, "tensors")
    pieces = [p.input if p is not None and p.op == Op.NEG else p for p in parts]
    for piece in pieces:
        if piece is None or piece.op != Op.CHANNELS:
            return _why_not_channels(piece)
    if not equal(pieces[0].input, pieces[1].input):
        return f"its two pieces are channels of different tensors ({_quoted(pieces[0])}, {_quoted(pieces[1])})"
    wanted = ("second_half", "first_half") if turned.op == Op.CAT else ("odd", "even")
    if signed(parts, *wanted) is None:
        written = ", ".join(("-" if p.op == Op.NEG else "") + q.name.replace("_", " ") for p, q in zip(parts, pieces))
        if {q.name for q in pieces} != set(wanted):
            how = "concatenation" if turned.op == Op.CAT else "stack"
            other = "stacks the pairs" if turned.op == Op.CAT else "concatenates the halves"
            return (f"it {verb} the channels ({written}); the rotation of these channels {other}, a {how} of them "
                    "is another permutation")
        expected = f"-{wanted[0]}, {wanted[1]}".replace("_", " ")
        return f"its pieces are ({written}), not ({expected})"
    if x is not None and not equal(pieces[0].input, x):
        return f"it rotates {_quoted(pieces[0].input)}, not the {_quoted(x)} multiplied by cos"
    if turned.op == Op.STACK:
        return "the stacked pairs are not proven to be flattened back into the last dim (flatten(-2), reshape_as(x))"
    return f"its term with the unrotated {_quoted(x)} is subtracted, which makes it no rotation"


def _why_branches(phi: Value, x: Optional[Value]) -> str:
    """Why a rotation chosen by a branch is not read: the branch that is not a rotation, or how the
    two rotations differ."""
    flag, inverted = flag_of(phi["test"])
    name = _quoted(flag) if flag is not None else "a condition"
    turns = {k: rotation(phi[k]) if phi[k] is not None else None for k in ("then", "else")}
    for key, turn in turns.items():
        if turn is None:
            side = "true" if (key == "then") != inverted else "false"
            inner = _rotation_like(phi[key])
            why = why_unproven(inner, x) if inner is not None else "it is not a rotation"
            return f"where {name} is {side}, {why}"
    then, other = turns["then"], turns["else"]
    if then.switch is not None or other.switch is not None:
        return f"it chooses its rotation by {name} and by a further condition"
    if not equal(then.x, other.x):
        return f"its two branches on {name} rotate different tensors"
    if then.negated != other.negated:
        return f"its two branches on {name} rotate with opposite signs"
    return f"it rotates {_quoted(then.x)}, not the {_quoted(x)} multiplied by cos"


def why_not_rotation_matrix(matrix: Value, written) -> str:
    """Why the 2x2 table a rotation applies (``written``: its source there) is not read as
    ``[[cos, -sin], [sin, cos]]``."""
    name = f"`{code(written).strip()}`" if written is not None else _quoted(matrix)
    entries = entries_of(matrix)
    if entries is None:
        return (f"its 2x2 table {name} is not built in this function from four entries (torch.stack([cos, -sin, "
                "sin, cos], -1) made 2x2), so it is not proven to be a rotation matrix")
    if not equal(entries[0], entries[3]):
        return f"its 2x2 table {name} has different diagonal entries ({_quoted(entries[0])}, {_quoted(entries[3])})"
    if matrix_entries(matrix) is None:
        return (f"the off-diagonal entries of its 2x2 table {name} ({_quoted(entries[1])}, {_quoted(entries[2])}) "
                "are not each other's negation")
    return f"its 2x2 table {name} is a rotation matrix, but its result is not where a guard could replace it"


def _why_not_channels(piece: Optional[Value]) -> str:
    """Why a piece of a rotation is not read as a half or the even/odd channels of a tensor."""
    if piece is not None and piece.op == Op.GETITEM:
        parts = subscript(piece)
        last = parts[-1] if parts else None
        bound = next((b for b in (last[1:3] if last and last[0] == "slice" else ()) if b is not None), None)
        if bound is not None and number(bound) is None:
            return (f"{_quoted(piece)} is split at {_quoted(bound)}, which is not proven to be half of the last dim "
                    f"of {_quoted(piece.input)}")
    return (f"{_quoted(piece)} is not proven to be a half or the even or odd channels of the last dim "
            "(x[..., : x.shape[-1] // 2], x[..., ::2])")


def _quoted(value: Optional[Value]) -> str:
    """The source of ``value`` in backticks; an item unpacked from a tuple (``x1, x2 = t.unbind(-2)``),
    which has none of its own, as ``item 0 of `t.unbind(-2)```."""
    if value is not None and value.node is not None:
        return f"`{code(value.node).strip()}`"
    source = value.via if value is not None and value.via is not None else value
    if source is not None and source.op == Op.ITEM and source.input is not None and source.input.node is not None:
        return f"item {int(source.number)} of `{code(source.input.node).strip()}`"
    return f"`{value.name}`" if value is not None and value.name else "a value computed elsewhere"


def _has_complex_factor(value: Optional[Value], depth: int = 0) -> bool:
    """A product (of any length) with a ``view_as_complex`` factor."""
    if value is None or value.op != Op.MUL or depth > 4:
        return False
    return any(v is not None and (v.op == Op.VIEW_AS_COMPLEX or _has_complex_factor(v, depth + 1))
               for v in (value.input, value["other"]))


def _rotation_helper_call(value: Value) -> Optional[Tuple[Value, Value]]:
    """(the call, x) for ``x * cos + f(x) * sin`` where ``f`` is a function the view did not read whose
    name says it rotates (``rotate_half`` imported from another module, or one of this file the view
    could not inline)."""
    for x, turned in _sum_readings(value):
        while turned is not None and turned.op == Op.CAST:  # rotate_half(q).float()
            turned, x = turned.input, x.input if x is not None and x.op == Op.CAST else x
        if turned is not None and turned.op == Op.CALL and turned["arg0"] is not None \
                and equal(turned["arg0"], x) and _rotation_name(turned["callee"]):
            return turned, x
    return None


def _rotation_name(callee: Optional[Value]) -> bool:
    """An imported or global function (not a parameter), a function of an imported module or a method
    of the class, whose name says it rotates."""
    if callee is None:
        return False
    if callee.op == Op.ATTR and callee.input is not None:
        base = callee.input
        method = base.op == Op.PARAM and base.name == "self" and callee.name in base.view.scope.methods
        if not (method or base.op in (Op.NAME, Op.FREE)):
            return False
    elif callee.op not in (Op.NAME, Op.FREE):
        return False
    return rotation_name_text(callee.name or "")
