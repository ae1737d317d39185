"""Shape-only normalisations of the dataflow view (``view.normal`` holds the op normalisations and
the one ordered list of all of them): parts of the last dim as ``channels``, channel pairs as
``unflatten``/``flatten``, einops' pair reshapes, and the items of tuple results; and the shape
readers the matchers share (``equal``, ``peel``, ``last_dim_size``).
"""

from __future__ import annotations

import re

from .values import Value, derived, number, same_value
from .ops import Op
from .rank import rank


# -- channels of the last dim (rotary embedding) -------------------------------------------------
# ``channels(x)`` names a part of x's last dim: ``first_half``/``second_half`` (split at D // 2) or
# ``even``/``odd`` (channels 0, 2, 4, ... and 1, 3, 5, ...); ``number`` 4 when the spelling reads
# the last dim only of a 4-D x (``x[:, :, :, ::2]``). ``unflatten(x, -1, (-1, 2))`` is x's channel
# pairs; ``flatten(y, -2)`` joins them back. Spellings:
#
# * ``x[..., :h]``, ``x[..., h:]`` with ``h = x.shape[-1] // 2`` or ``x.size(-1) // 2``,
#   ``x.chunk(2, dim=-1)``, ``torch.chunk(x, 2, -1)``, ``x.split(h, dim=-1)`` → first/second half
# * ``x[..., ::2]``, ``x[..., 1::2]``, ``pairs[..., 0]``, ``pairs[..., 1]``, ``pairs.unbind(-1)`` → even/odd
#   (of ``flatten(pairs, -2)``: a guard checks that pairs' last dim is 2)
# * ``x.reshape(*x.shape[:-1], -1, 2)``, ``x.view(*x.shape[:-1], h, 2)``, ``x.unflatten(-1, (-1, 2))`` → pairs
# * ``y.reshape(*y.shape[:-2], -1)``, ``y.flatten(-2)``, ``stack((-odd, even), -1).reshape_as(x)`` → flatten(y, -2)


def peel(value):
    """``value`` with casts and ``same`` looked through (a value of the same shape)."""
    while value is not None and value.op in (Op.CAST, Op.SAME):
        value = value.input
    return value


PURE_OPS = {Op.GETITEM, Op.ATTR, Op.CAST, Op.SAME, Op.UNSQUEEZE, Op.SQUEEZE, Op.RESHAPE, Op.TRANSPOSE, Op.TRANSPOSED,
            Op.PERMUTE, Op.SIZE, Op.NDIM, Op.SLICE, Op.CONST, Op.STR, Op.TUPLE, Op.UNPACK, Op.NEG, Op.ADD, Op.SUB, Op.MUL,
            Op.DIV, Op.FLOORDIV, Op.ITEM, Op.CHANNELS, Op.UNFLATTEN, Op.FLATTEN, Op.EXPAND, Op.NAME, Op.PARAM, Op.FREE}


def equal(a, b, depth: int = 0) -> bool:
    """Two values that compute the same thing: one value, or the same pure computation of the same
    values (``q[..., :r]`` written twice)."""
    if same_value(a, b):
        return True
    if a is None or b is None or a.op != b.op or a.op not in PURE_OPS or depth > 12:
        return False
    if a.op in (Op.PARAM, Op.FREE, Op.NAME):
        return False  # same_value said they differ
    if (a.name, a.number) != (b.name, b.number) or a.kw.keys() != b.kw.keys() or len(a.items) != len(b.items):
        return False
    if a.op == Op.CONST and a.node is not None and b.node is not None:
        return True  # same literal value
    return all(equal(a.kw[k], b.kw[k], depth + 1) for k in a.kw) and \
        all(equal(x, y, depth + 1) for x, y in zip(a.items, b.items))


def same_shape(a, b) -> bool:
    return a is not None and b is not None and equal(peel(a), peel(b))


def subscript(value):
    """A ``getitem`` value's elements: ("index", value) or ("slice", lower, upper, step)."""
    parts = {}
    for key, item in value.kw.items():
        if key != "input":
            stem = key.rstrip("0123456789")
            parts.setdefault(int(key[len(stem):]), {})[stem] = item
    return [("index", p["index"]) if "index" in p else ("slice", p.get("lower"), p.get("upper"), p.get("step"))
            for _, p in sorted(parts.items())]


def is_full(part) -> bool:
    return part[0] == "slice" and part[1:] == (None, None, None)


def is_ellipsis(part) -> bool:
    return part[0] == "index" and part[1].op == Op.CONST and part[1].name == "..."


def last_dim_size(value):
    """The tensor whose last dim's size ``value`` is (``x.shape[-1]``, ``x.size(-1)``), or None."""
    if value is not None and value.op == Op.SIZE and number(value["dim"]) == -1:
        return value.input
    if value is not None and value.op == Op.GETITEM and value.input is not None and value.input.op == Op.ATTR \
            and value.input.name == "shape":
        parts = subscript(value)
        if len(parts) == 1 and parts[0][0] == "index" and number(parts[0][1]) == -1:
            return value.input.input
    return None


def is_half_of(value, x) -> bool:
    """``value`` is ``x.shape[-1] // 2`` (or ``x.size(-1) // 2``), or half of the size the code gave x's
    last dim (``h // 2`` of ``x = t.view(b, s, n, h)``, 32 of ``t.view(b, s, n, 64)``)."""
    if value is None:
        return False
    if value.op == Op.FLOORDIV and number(value["other"]) == 2:
        return same_shape(last_dim_size(value.input), x) or equal(value.input, written_last_size(x))
    size = number(written_last_size(x))
    return number(value) is not None and size is not None and 2 * number(value) == size


def _shape_items(value):
    """The sizes of a ``view``/``reshape`` written out (``view(a, b, c)``, ``view((a, b, c))``), or ()."""
    shape = value["*rest"] or value["shape"]
    items = shape.items if shape is not None and shape.op == Op.TUPLE else ()
    return items[0].items if len(items) == 1 and items[0].op == Op.TUPLE else items


def written_last_size(x, depth: int = 0):
    """The size the code wrote for x's last dim: the last size of the ``view``/``reshape`` that made x
    (not -1, not unpacked), looked through casts, negation and transposes of other dims; or None."""
    while x is not None and depth < 8:
        depth += 1
        if x.op in (Op.CAST, Op.SAME, Op.NEG):
            x = x.input
        elif x.op == Op.TRANSPOSE and _keeps_last(x):
            x = x.input
        elif x.op == Op.RESHAPE:
            items = _shape_items(x)
            last = items[-1] if items else None
            return None if last is None or last.op == Op.UNPACK or number(last) == -1 else last
        else:
            return None
    return None


def _keeps_last(value) -> bool:
    """A ``transpose(a, b)`` of two dims that are not the last of its input (whose rank the code fixes)."""
    dims = [number(value["dim0"]), number(value["dim1"])]
    if None in dims:
        return False
    if all(d < -1 for d in dims):
        return True
    inner = rank(value.input)
    return inner is not None and all(0 <= d < inner - 1 for d in dims)


def dim_size_of(value, x, index: int) -> bool:
    """``value`` is the size of x's dim ``index``: ``x.shape[i]``, ``x.size(i)``, or item i of
    ``x.shape`` / ``x.size()`` unpacked (``b, n, s, d = x.size()``)."""
    if value is None:
        return False
    if value.op == Op.SIZE:
        return number(value["dim"]) == index and same_shape(value.input, x)
    if value.op == Op.ITEM:
        source = value.input
        return value.number == index and source is not None and (
            source.op == Op.SIZE and source["dim"] is None or source.op == Op.ATTR and source.name == "shape") \
            and same_shape(source.input, x)
    if value.op == Op.GETITEM and value.input is not None and value.input.op == Op.ATTR \
            and value.input.name == "shape":
        parts = subscript(value)
        return len(parts) == 1 and parts[0][0] == "index" and number(parts[0][1]) == index \
            and same_shape(value.input.input, x)
    return False


def halves_of(value):
    """(x, rank) when ``value`` is x's last dim split in two halves, [..., 2, D/2]
    (``unflatten(x, -1, (2, -1))``; rank: the number of dims the code reads x as, or None), else None."""
    if value is None or value.op != Op.UNFLATTEN or number(value["dim"]) != -1 or value["sizes"] is None:
        return None
    sizes = value["sizes"].items
    if len(sizes) == 2 and number(sizes[0]) == 2 and (number(sizes[1]) == -1 or is_half_of(sizes[1], value.input)):
        return value.input, value.number
    return None


def pairs_of(value):
    """The tensor whose channel pairs ``value`` is (``unflatten(x, -1, (-1, 2))``), or None."""
    if value is None or value.op != Op.UNFLATTEN or number(value["dim"]) != -1 or value["sizes"] is None:
        return None
    sizes = value["sizes"].items
    if len(sizes) == 2 and number(sizes[1]) == 2 and (number(sizes[0]) == -1 or is_half_of(sizes[0], value.input)):
        return value.input
    return None


def _channels_value(value, x, part, rank=None, pairs=None, split=False):
    kw = {"input": x} if pairs is None else {"input": x, "pairs": pairs}
    # an item bound by unpacking, or any item of a split (``t = x.chunk(2, -1)`` then ``t[0]``): the
    # split's statement computes it too
    via = value if value.node is None or split else None
    return Value(Op.CHANNELS, kw, node=value.node, view=value.view, name=part, number=rank, via=via)


def _sliced_channels(value):
    parts = subscript(value)
    *lead, last = parts
    if lead and all(is_ellipsis(p) for p in lead) and len(lead) == 1:
        rank = None
    elif len(lead) == 3 and all(is_full(p) for p in lead):
        rank = 4
    else:
        return value
    x = value.input
    if last[0] == "index" and rank is None and number(last[1]) in (0, 1):  # pairs[..., 0]: pairs' last dim is 2
        return _channels_value(value, _joined(value, x), ("even", "odd")[int(number(last[1]))], pairs=x)
    if last[0] != "slice":
        return value
    _, lower, upper, step = last
    if number(step) == 2 and upper is None and (lower is None or number(lower) in (0, 1)):
        return _channels_value(value, x, "odd" if number(lower) == 1 else "even", rank)
    if step is None or number(step) == 1:
        if (lower is None or number(lower) == 0) and is_half_of(upper, x):
            return _channels_value(value, x, "first_half", rank)
        if upper is None and is_half_of(lower, x):
            return _channels_value(value, x, "second_half", rank)
    return value


def _joined(value, pairs):
    """The tensor whose channel pairs ``pairs`` holds: its ``unflatten`` input, else ``flatten(pairs, -2)``."""
    if pairs_of(pairs) is not None:
        return pairs_of(pairs)
    return Value(Op.FLATTEN, {"input": pairs, "start_dim": Value(Op.CONST, number=-2, view=value.view)}, view=value.view)


def _split_channels(value, source, index):
    """Item ``index`` of ``x.chunk(2, -1)``, ``x.split(x.shape[-1] // 2, -1)``, ``pairs.unbind(-1)`` or
    ``halves.unbind(-2)``."""
    if source is not None and index in (0, 1) and source.op == Op.UNBIND and number(source["dim"]) == -2 \
            and halves_of(source.input) is not None:
        x, rank = halves_of(source.input)
        return _channels_value(value, x, ("first_half", "second_half")[index], rank)
    if source is None or index not in (0, 1) or number(source["dim"]) != -1:
        return value
    x = source.input or source["tensor"]
    if source.op == Op.CHUNK and number(source["chunks"]) == 2:
        return _channels_value(value, x, ("first_half", "second_half")[index], split=True)
    if source.op == Op.SPLIT and is_half_of(source["split_size"] or source["split_size_or_sections"], x):
        return _channels_value(value, x, ("first_half", "second_half")[index], split=True)
    if source.op == Op.UNBIND:
        return _channels_value(value, _joined(value, x), ("even", "odd")[index], pairs=x, split=True)
    return value


def channels(value):
    if value.op == Op.ITEM:
        return _split_channels(value, value.input, int(value.number))
    if value.op == Op.GETITEM and value.input is not None:
        parts = subscript(value)
        if len(parts) == 1 and parts[0][0] == "index" and value.input.op in (Op.CHUNK, Op.SPLIT, Op.UNBIND):
            index = number(parts[0][1])
            return _split_channels(value, value.input, int(index)) if index is not None else value
        return _sliced_channels(value)
    return value


def _shape_prefix(item, drop: int):
    """The tensor ``T`` of an unpacked ``*T.shape[:-drop]``, or None."""
    if item is None or item.op != Op.UNPACK or item.input is None or item.input.op != Op.GETITEM:
        return None
    shape = item.input.input
    parts = subscript(item.input)
    if shape is None or shape.op != Op.ATTR or shape.name != "shape" or len(parts) != 1 or parts[0][0] != "slice":
        return None
    _, lower, upper, step = parts[0]
    return shape.input if lower is None and step is None and number(upper) == -drop else None


def _stacked_channels_of(stack):
    """The tensor whose channels ``stack((±a, ±b), -1)`` stacks, or None."""
    parts = stack["tensors"].items if stack["tensors"] is not None else ()
    if number(stack["dim"]) != -1 or len(parts) != 2:
        return None
    sources = [(p.input if p.op == Op.NEG else p) for p in parts]
    if all(s is not None and s.op == Op.CHANNELS for s in sources) and equal(sources[0].input, sources[1].input):
        return sources[0].input
    return None


def reshaped_as(value):
    """``stack((-odd, even), -1).reshape_as(x)`` (RoFormer) → flatten(..., -2): the stacked pairs of
    x's channels have x's shape with the last dim split in two."""
    if value.op == Op.RESHAPE_AS and value.input is not None and value.input.op == Op.STACK:
        source = _stacked_channels_of(value.input)
        if source is not None and same_shape(value["other"], source):
            return derived(value, Op.FLATTEN, {"input": value.input,
                                               "start_dim": Value(Op.CONST, number=-2, view=value.view)})
    return value


def _pattern_side(text: str):
    """``"... (d r)"`` → ``["...", ("d", "r")]``: axes, a group of two as a pair; None for other forms."""
    parts, group = [], None
    for token in re.findall(r"\.\.\.|\(|\)|\w+", text):
        if token == "(":
            if group is not None:
                return None
            group = []
        elif token == ")":
            if group is None or len(group) != 2:
                return None
            parts.append(tuple(group))
            group = None
        elif group is not None:
            group.append(token)
        else:
            parts.append(token)
    return parts if group is None else None


def rearranged(value):
    """einops' ``rearrange(x, "... (d r) -> ... d r", r=2)`` → unflatten(x, -1, (-1, 2)) (channel
    pairs), and ``rearrange(y, "... d r -> ... (d r)")`` → flatten(y, -2): the reshapes only, the
    leading axes the same on both sides."""
    pattern = value["pattern"] if value.op == Op.REARRANGE else None
    if pattern is None or pattern.op != Op.STR or "->" not in (pattern.name or ""):
        return value
    left, right = (_pattern_side(side) for side in pattern.name.split("->", 1))
    if not left or not right or any(isinstance(p, tuple) for p in left[:-1] + right[:-1]):
        return value
    const = lambda n: Value(Op.CONST, number=n, view=value.view)  # noqa: E731
    if isinstance(left[-1], tuple) and left[:-1] == right[:-2] and tuple(right[-2:]) == left[-1] \
            and number(value[left[-1][1]]) == 2:
        sizes = Value(Op.TUPLE, view=value.view, items=(const(-1), const(2)))
        return derived(value, Op.UNFLATTEN, {"input": value.input, "dim": const(-1), "sizes": sizes})
    if isinstance(left[-1], tuple) and left[:-1] == right[:-2] and tuple(right[-2:]) == left[-1] \
            and number(value[left[-1][0]]) == 2:  # "... (j d) -> ... j d", j=2: the two halves
        sizes = Value(Op.TUPLE, view=value.view, items=(const(2), const(-1)))
        return derived(value, Op.UNFLATTEN, {"input": value.input, "dim": const(-1), "sizes": sizes})
    if isinstance(right[-1], tuple) and right[:-1] == left[:-2] and tuple(left[-2:]) == right[-1]:
        return derived(value, Op.FLATTEN, {"input": value.input, "start_dim": const(-2)})
    return value


def reshaped_halves(value):
    """``x.view(*x.shape[:-1], 2, -1)``, ``x.view(b, n, s, 2, d // 2)`` with b, n, s, d x's own sizes →
    unflatten(x, -1, (2, -1)): x's halves, [..., 2, D/2] (the sizes written out fix x as 4-D: ``number``)."""
    if value.op != Op.RESHAPE:
        return value
    items, x = _shape_items(value), value.input
    if len(items) < 3 or number(items[-2]) != 2:
        return value
    lead, half = items[:-2], items[-1]
    if len(lead) == 1 and same_shape(_shape_prefix(lead[0], 1), x):
        rank = None
    elif len(lead) == 3 and all(dim_size_of(item, x, i) for i, item in enumerate(lead)):
        rank = 4
    else:
        return value
    if not (number(half) == -1 or is_half_of(half, x) or
            rank == 4 and half.op == Op.FLOORDIV and number(half["other"]) == 2 and dim_size_of(half.input, x, 3)):
        return value
    const = lambda n: Value(Op.CONST, number=n, view=value.view)  # noqa: E731
    sizes = Value(Op.TUPLE, view=value.view, items=(const(2), const(-1)))
    return Value(Op.UNFLATTEN, {"input": x, "dim": const(-1), "sizes": sizes}, node=value.node, view=value.view,
                 number=rank)


def reshaped_pairs(value):
    """``x.reshape(*x.shape[:-1], -1, 2)`` → unflatten(x, -1, (-1, 2)); ``y.reshape(*y.shape[:-2], -1)``
    → flatten(y, -2) (also ``view``, ``torch.reshape(x, (...))``)."""
    if value.op != Op.RESHAPE:
        return value
    shape = value["*rest"] or value["shape"]
    items = shape.items if shape is not None else ()
    x = value.input
    const = lambda n: Value(Op.CONST, number=n, view=value.view)  # noqa: E731
    if len(items) == 3 and same_shape(_shape_prefix(items[0], 1), x) and number(items[2]) == 2 and (
            number(items[1]) == -1 or is_half_of(items[1], x)):
        sizes = Value(Op.TUPLE, view=value.view, items=(const(-1), const(2)))
        return derived(value, Op.UNFLATTEN, {"input": x, "dim": const(-1), "sizes": sizes})
    if len(items) == 2 and same_shape(_shape_prefix(items[0], 2), x) and number(items[1]) == -1:
        return derived(value, Op.FLATTEN, {"input": x, "start_dim": const(-2)})
    return value


#: ops whose result is a tuple of tensors, and the names of the fields of their named tuples
TUPLES = {Op.TOPK: ("values", "indices"), Op.MAX: ("values", "indices"), Op.CHUNK: (), Op.SPLIT: (), Op.UNBIND: ()}


def item(value):
    """One element of a tuple result, however it is read: ``[i]``, ``.values``/``.indices``, unpacking."""
    source, index = value.input, None
    if source is None or source.op not in TUPLES:
        return value
    if value.op == Op.GETITEM and set(value.kw) == {"input", "index0"}:
        index = number(value["index0"])
    elif value.op == Op.ATTR and value.name in TUPLES[source.op]:
        index = TUPLES[source.op].index(value.name)
    elif value.op == Op.ITEM:
        index = value.number
    if index is None or index != int(index) or (index < 0 and source.op != Op.CHUNK):
        return value
    if source.op == Op.MAX and index == 0 and source["dim"] is not None:  # t.max(dim).values
        return Value(Op.AMAX, {"input": source.input, "dim": source["dim"], **({"keepdim": source["keepdim"]}
                                                                             if source["keepdim"] else {})},
                     node=value.node, view=value.view)
    if value.op == Op.ITEM:
        return value
    return Value(Op.ITEM, {"input": source}, node=value.node, view=value.view, number=index)
