"""RMSNorm in the dataflow view: ``x * rsqrt(mean(x², -1, keepdim=True) + eps) * weight``.

Spellings of the pieces (``pow(2)``, ``x * x``, ``** 2``, ``square``; ``rsqrt``, ``pow(-0.5)``,
``** -0.5``, ``1 / sqrt``; functions, methods, locals over several statements, ``self._norm``
helpers) are the view's business (``view.normal``); this module reads a value as

    [cast back] (product of: the normalised part, and at most one weight factor)

where the normalised part is ``x * rsqrt(mean(x²) + eps)``, ``x / sqrt(mean(x²) + eps)`` or
``F.rms_norm(x, shape, weight, eps)``, each on x or on x cast to float32 (T5: the mean of
``x.to(float32)²`` times x itself, which the product promotes exactly), the product optionally
cast back to x's dtype (``.to(input_dtype)``, ``.type_as(x)``), to the weight's, or through T5's
``if weight.dtype in [float16, bfloat16]: x = x.to(weight.dtype)``. The weight factor is a weight
(``self.weight``, ``weight.float()``), Gemma's ``1 + weight``, or litgpt's
``(1 + w) if add_unit_offset else w``. The mean runs over the last dim, or over a dim the code
knows only at run time (litgpt's ``self.dim``), which the guard checks.

``match(value)`` gives a ``Norm``, a ``Refusal`` (kind FORM, with the reason) when the value holds an
inverse RMS the kernel does not reproduce around it, or None (inside, the readers raise
``_Mismatch``, which ``match`` turns into the refusal). ``output_sources`` says which dtypes the
original's result is promoted from, so that a fused call can be cast to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Set, Tuple, Union

from ...view.values import number
from ...view.shapes import equal
from ...view.regions import interior
from ...view.syntax import code
from ...view import Value
from ...view.ops import Op
from ...refusal import Refusal, RefusalKind

FLOAT32 = ("torch.float32", "torch.float")
HALVES = ("torch.float16", "torch.half")
GENERIC = "not of the form x * rsqrt(mean(x**2, -1, keepdim=True) + eps) * weight"
BRANCHES = "the norm is not straight-line code (branches, loops or side effects)"
NEVER_CAST_BACK = "x is normalised in float32 and never cast back, but the fused kernel returns x's dtype"
WEIGHT_OPS = (Op.PARAM, Op.ATTR, Op.FREE, Op.NAME, Op.GETITEM, Op.CAST, Op.SAME, Op.PHI, Op.ADD)


class _Mismatch(Exception):
    """The value holds an inverse RMS, but not in a form the kernel reproduces; ``reason`` says why."""

    def __init__(self, reason: str, core: Optional[Value] = None) -> None:
        super().__init__(reason)
        self.reason, self.core = reason, core


@dataclass
class Norm:
    out: Value  # the value the fused call computes
    x: Value  # the tensor normalised, as given (before an upcast to float32)
    eps: Optional[Value]  # None: F.rms_norm's default
    weight: Optional[Value] = None
    gemma: bool = False  # the weight factor is 1 + weight (``weight`` holds the weight)
    dim: Optional[Value] = None  # the reduction dim, when the code knows it only at run time
    shape: Optional[Value] = None  # F.rms_norm's normalized_shape
    dtype: Optional[str] = None  # "x": the result has x's dtype; "promoted": x's and the weight's; None: equal only
    core: Optional[Value] = None  # the inverse RMS (or the rms_norm call)


def _is_dtype(value: Optional[Value], names) -> bool:
    return value is not None and value.op == Op.NAME and value.name in names


def upcast(value: Value) -> Tuple[Value, bool]:
    """(inner, True) for ``e.float()``, ``e.to(torch.float32)``, ``e.type(torch.float32)``."""
    if value is not None and value.op == Op.CAST and _is_dtype(value["dtype"], FLOAT32) and value.input is not None:
        return value.input, True
    return value, False


def cast_target(value: Value) -> Optional[Value]:
    """The tensor whose dtype ``value`` casts to: ``e.to(t.dtype)`` (also through a local),
    ``e.type_as(t)``; T5's half-precision branch counts as a cast to its weight's dtype."""
    if value.op == Op.CAST:
        dtype, other = value["dtype"], value["other"]
        if other is not None:
            return other
        if dtype is not None and dtype.op == Op.ATTR and dtype.name == "dtype":
            return dtype.input
    if value.op == Op.PHI:
        return half_branch_target(value)
    return None


def half_branch_target(value: Value) -> Optional[Value]:
    """T5's ``if w.dtype in [torch.float16, torch.bfloat16]: h = h.to(w.dtype)``: w, else None."""
    test, then, other = value["test"], value["then"], value["else"]
    if test is None or test.op != Op.COMPARE or test.name != "In" or then is None or then.op != Op.CAST:
        return None
    subject, dtypes = test.input, test["other0"]
    names = {item.name for item in (dtypes.items if dtypes is not None else ())}
    if not (subject is not None and subject.op == Op.ATTR and subject.name == "dtype" and names & set(HALVES)
            and "torch.bfloat16" in names):
        return None
    target = then["dtype"]
    if target is None or target.op != Op.ATTR or target.name != "dtype" or not equal(target.input, subject.input):
        return None
    return subject.input if then.input is other else None


def factors(value: Value) -> List[Value]:
    """The operands of a chain of ``*``."""
    if value.op == Op.MUL:
        return factors(value.input) + factors(value["other"])
    return [value]


def mean_square(value: Value) -> Optional[Tuple[Value, Value]]:
    """(x, the mean) for ``mean(square(x), ...)``."""
    if value is not None and value.op == Op.MEAN and value.input is not None and value.input.op == Op.SQUARE:
        return value.input.input, value
    return None


def _ms_plus_eps(value: Value) -> Optional[Tuple[Value, Value, Value]]:
    """(x, eps, the mean) for ``mean(x²) + eps`` (either order)."""
    if value is None or value.op != Op.ADD:
        return None
    for ms, eps in ((value.input, value["other"]), (value["other"], value.input)):
        found = mean_square(ms)
        if found is not None:
            return found[0], eps, found[1]
    return None


def inverse_rms(value: Value) -> Optional[Tuple[Value, Value, Value]]:
    """(x, eps, the mean) for ``rsqrt(mean(x²) + eps)`` (any spelling the view normalises)."""
    return _ms_plus_eps(value.input) if value is not None and value.op == Op.RSQRT else None


def is_core(value: Value) -> bool:
    """An inverse RMS or RMS: ``rsqrt``/``sqrt`` of ``mean(x²) + eps``, or of ``mean(x²)``."""
    if value.op not in (Op.RSQRT, Op.SQRT) or value.input is None:
        return False
    return _ms_plus_eps(value.input) is not None or mean_square(value.input) is not None


def has_eps(core: Value) -> bool:
    """The core adds something to the mean of squares (``rsqrt(mean(x²) + eps)``)."""
    return core.op in (Op.RSQRT, Op.SQRT) and _ms_plus_eps(core.input) is not None


def _operand(squared: Value, scaled: Value) -> Optional[Value]:
    """What is normalised when ``scaled`` is multiplied by the inverse RMS of ``squared``: ``scaled``
    when both are one value; the float32 ``squared`` when it is ``scaled`` cast to float32 (T5)."""
    if equal(squared, scaled):
        return scaled
    inner, up = upcast(squared)
    return squared if up and equal(inner, scaled) else None


@dataclass
class _Part:
    operand: Value  # what is normalised (maybe x cast to float32)
    eps: Optional[Value]
    mean: Optional[Value]
    core: Value
    weight: Optional[Value] = None  # F.rms_norm's own weight
    shape: Optional[Value] = None
    cast: Optional[Value] = None  # the tensor whose dtype the part is cast back to


def _without_eps(value: Optional[Value]) -> bool:
    """``rsqrt``/``sqrt`` of a mean of squares with nothing added."""
    return value is not None and value.op in (Op.RSQRT, Op.SQRT) and mean_square(value.input) is not None


def _normalised(group: List[Value]) -> Optional[_Part]:
    """The normalised part when ``group`` (one or two factors) is one."""
    if any(_without_eps(v) or v.op == Op.DIV and _without_eps(v["other"]) for v in group):
        raise _Mismatch("no eps is added to the mean of squares (npu_rms_norm adds its epsilon inside the root)")
    if len(group) == 2:
        for scaled, inv in (group, group[::-1]):
            if inv.op == Op.CAST and inv.input is not None and inv.input.op == Op.RSQRT and cast_target(inv) is not None \
                    and equal(cast_target(inv), scaled):
                inv = inv.input  # x * rsqrt(...).to(x.dtype): the inverse RMS rounded to x's dtype first
            found = inverse_rms(inv)
            operand = _operand(found[0], scaled) if found is not None else None
            if operand is not None:
                return _Part(operand, found[1], found[2], inv)
        return None
    value = group[0]
    if value.op == Op.DIV and value["other"] is not None and value["other"].op == Op.SQRT:
        found = _ms_plus_eps(value["other"].input)
        operand = _operand(found[0], value.input) if found is not None else None
        if operand is not None:
            return _Part(operand, found[1], found[2], value["other"])
    if value.op == Op.RMS_NORM and value.input is not None and value["normalized_shape"] is not None:
        weight = value["weight"]
        weight = None if weight is not None and weight.op == Op.CONST and weight.name == "None" else weight
        eps = value["eps"]
        eps = None if eps is not None and eps.op == Op.CONST and eps.name == "None" else eps
        return _Part(value.input, eps, None, value, weight, value["normalized_shape"])
    return None


def _split(items: List[Value]) -> Tuple[_Part, List[Value]]:
    """The normalised part of a product (one factor, or a pair) and the other factors."""
    groups = [[i] for i in range(len(items))] + [[i, j] for i in range(len(items)) for j in range(i + 1, len(items))]
    for group in groups:
        part = _normalised([items[i] for i in group])
        if part is not None:
            return part, [f for i, f in enumerate(items) if i not in group]
    raise _Mismatch(GENERIC)


def _peel_cast_back(value: Value) -> Tuple[Value, Optional[Value]]:
    target = cast_target(value)
    if target is not None:
        return (value["else"] if value.op == Op.PHI else value.input), target
    return value, None


def _weight(value: Value) -> Tuple[Value, bool]:
    """(weight, Gemma's 1 + weight) for the weight factor, or _Mismatch."""
    inner, _ = upcast(value)
    if inner.op == Op.ADD:
        for one, other in ((inner.input, inner["other"]), (inner["other"], inner.input)):
            if number(one) == 1:
                return upcast(other)[0], True
    if value.op not in WEIGHT_OPS or value.op == Op.ADD:
        raise _Mismatch(f"the norm is multiplied by `{_text(value)}`, not by a weight parameter (a gated norm?)")
    return inner, False


def _text(value: Value) -> str:
    return code(value.node).strip() if value.node is not None else value.op


def _holds_core(value: Value, depth: int = 0) -> bool:
    """An inverse RMS or an ``rms_norm`` call within a few steps of ``value`` (cheap and necessary)."""
    if value is None or depth > 6:
        return False
    if value.op == Op.RMS_NORM or is_core(value):
        return True
    return any(_holds_core(v, depth + 1) for v in value.kw.values())


def _depends_on(value: Value, x: Value) -> bool:
    return any(equal(v, x) for v in interior(value, []))


def match(value: Value) -> Union[Norm, Refusal, None]:
    """The RMSNorm ``value`` computes, None when it holds no inverse RMS, or why the kernel cannot
    compute it."""
    try:
        return _match(value)
    except _Mismatch as exc:
        return Refusal(RefusalKind.FORM, exc.reason, node=exc.core.node if exc.core is not None else None)


def _match(value: Value) -> Optional[Norm]:
    if value.op not in (Op.MUL, Op.DIV, Op.CAST, Op.RMS_NORM, Op.PHI):
        return None
    if not _holds_core(value):
        return None
    inner, outer = _peel_cast_back(value)
    items = factors(inner)
    part, rest = _split_part(items)
    if len(rest) > 1:
        texts = " * ".join(f"`{_text(f)}`" for f in rest)
        raise _Mismatch(f"the norm is multiplied by {texts}: more than one weight (a gated or scaled norm?)", part.core)
    weight, gemma = part.weight, False
    if rest:
        if part.weight is not None:
            raise _Mismatch("the norm is multiplied by a weight twice (F.rms_norm's and another)", part.core)
        if rest[0].op == Op.PHI and half_branch_target(rest[0]) is None and not _is_offset(rest[0]):
            raise _Mismatch(BRANCHES, part.core)
        weight, gemma = _weight(rest[0])
    x, _ = upcast(part.operand)
    if x.op == Op.SUB and x["other"] is not None and x["other"].op == Op.MEAN:
        raise _Mismatch("the mean is subtracted first (a LayerNorm-style norm, not RMSNorm)", part.core)
    if weight is not None and (_depends_on(weight, x) or weight.op == Op.CONST):
        raise _Mismatch(f"the norm is multiplied by `{_text(rest[0])}`, not by a weight parameter (a gated norm?)",
                       part.core)
    dim = _dim(part)
    norm = Norm(value, x, part.eps, weight, gemma, dim, part.shape, core=part.core)
    for target in (outer, part.cast):
        if target is not None and not equal(target, x) and not (weight is not None and equal(target, weight)):
            raise _Mismatch("the result is cast to a dtype other than the input's", part.core)
    if outer is not None and part.cast is not None:
        raise _Mismatch("the result is cast back twice", part.core)
    norm.dtype = output_dtype(value, norm)
    return norm


def _split_part(items: List[Value]):
    """``_split`` over the factors, where one factor may be the normalised part cast back."""
    try:
        return _split(items)
    except _Mismatch as exc:
        reason = exc.reason
    for index, item in enumerate(items):
        inner, target = _peel_cast_back(item)
        if target is None:
            continue
        if item.op == Op.PHI and half_branch_target(item) is None:
            continue
        try:
            part, more = _split(factors(inner))
        except _Mismatch:
            continue
        if more:
            continue  # a weight inside the cast: read from the outer product only
        part.cast = target
        return part, [f for i, f in enumerate(items) if i != index]
    phi = next((f for f in items if f.op == Op.PHI), None)
    raise _Mismatch(BRANCHES if phi is not None else reason)


def _is_offset(value: Value) -> bool:
    """litgpt's ``(1 + w) if add_unit_offset else w``."""
    then, other = value["then"], value["else"]
    if then is None or other is None or then.op != Op.ADD:
        return False
    return any(number(a) == 1 and equal(upcast(b)[0], upcast(other)[0])
               for a, b in ((then.input, then["other"]), (then["other"], then.input)))


def _dim(part: _Part) -> Optional[Value]:
    """The reduction dim when it is known only at run time; _Mismatch when it is not the last."""
    if part.mean is None:
        return None
    dim, keepdim = part.mean["dim"], part.mean["keepdim"]
    if keepdim is None or number(keepdim) != 1:
        raise _Mismatch("the mean is taken without keepdim=True", part.core)
    if dim is None or (dim.op == Op.CONST and number(dim) != -1) or dim.op == Op.TUPLE:
        raise _Mismatch("the mean runs over dims other than the last one", part.core)
    return None if dim.op == Op.CONST else dim


def output_sources(value: Value, norm: Norm, depth: int = 0) -> Optional[Set[str]]:
    """The dtypes the result is promoted from: "x", "w" (the weight's), "f32"; None when it depends
    on a branch (T5's half-precision cast: the result has x's dtype only when the dtypes agree)."""
    if depth > 40:
        return None
    if equal(value, norm.x):
        return {"x"}
    if norm.weight is not None and equal(value, norm.weight):
        return {"w"}
    if value.op in (Op.CONST, Op.PARAM, Op.ATTR, Op.NAME, Op.FREE) or (norm.eps is not None and equal(value, norm.eps)):
        return set()  # numbers: eps, 1 in 1 + w
    if value.op == Op.PHI:
        return None
    if value.op == Op.CAST:
        target = cast_target(value)
        if target is not None:
            return output_sources(target, norm, depth + 1)
        return {"f32"} if _is_dtype(value["dtype"], FLOAT32) else None
    if value.op in (Op.MUL, Op.ADD, Op.SUB, Op.DIV):
        a, b = output_sources(value.input, norm, depth + 1), output_sources(value["other"], norm, depth + 1)
        return None if a is None or b is None else a | b
    if value.op in (Op.RSQRT, Op.SQRT, Op.SQUARE, Op.NEG, Op.RMS_NORM) or (value.op == Op.MEAN and value["dtype"] is None):
        return output_sources(value.input, norm, depth + 1)
    return None


def output_dtype(value: Value, norm: Norm) -> Optional[str]:
    """"x" or "promoted" (see ``Norm.dtype``), None when only equal dtypes are proven; _Mismatch for
    a float32 result the kernel does not return."""
    found = output_sources(value, norm)
    if found is None:
        return None
    if "f32" in found:
        raise _Mismatch(NEVER_CAST_BACK, norm.core)
    return "x" if found == {"x"} else "promoted"
