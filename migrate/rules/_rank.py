"""The rank (number of dims) of a value of the dataflow view, where the code fixes it statically.

A fused rule guards what it cannot prove and lets the guard decide at run time; but where the code
itself fixes a tensor's rank (``x.view(b * h, n, d)``, ``rearrange(x, "b n (h d) -> (b h) n d")``,
``torch.bmm``) and the guard requires another, the guard can never hold and the site would be
counted as rewritten while never taking the fused path. ``rank(value)`` gives the rank when the code
shows it and None otherwise (a parameter, an attribute, anything this reader does not follow).
"""

from __future__ import annotations

from typing import Optional

from npu_migrate.migrate.rules._normal import number

DEPTH = 24
#: ops whose result has the rank of their input
SAME = {"cast", "same", "dropout", "softmax", "transposed", "transpose", "masked_fill", "tanh", "sigmoid", "relu",
        "neg", "sqrt", "rsqrt", "square", "cos", "sin", "clamp", "invert", "silu", "gelu", "act", "linear",
        "repeat_interleave", "expand"}
#: elementwise binary ops: the larger rank of the two operands (a Python number has none)
BINARY = {"add", "sub", "mul", "div", "pow", "floordiv"}
#: what a dim size of a shape is written as (a starred shape is none of them)
SIZES = {"const", "item", "size", "mul", "add", "sub", "floordiv", "div", "neg", "param", "name", "free", "attr",
         "getitem", "call"}


def rank(value, depth: int = 0) -> Optional[int]:
    """The number of dims of ``value`` when the code fixes it, else None."""
    if value is None or depth > DEPTH:
        return None
    op = value.op
    if op in SAME:
        return rank(value.input, depth + 1)
    if op in BINARY:
        left, right = rank(value.input, depth + 1), rank(value["other"], depth + 1)
        if value.input is not None and value.input.op == "const":
            return right
        if value["other"] is not None and value["other"].op == "const":
            return left
        return max(left, right) if left is not None and right is not None else None
    if op == "matmul":
        if value.name == "bmm":
            return 3
        left, right = rank(value.input, depth + 1), rank(value["other"], depth + 1)
        return max(left, right) if left is not None and right is not None and min(left, right) >= 2 else None
    if op in ("reshape", "permute"):
        return _shape_length(value["*rest"])
    if op == "unsqueeze":
        inner = rank(value.input, depth + 1)
        return inner + 1 if inner is not None else None
    if op == "squeeze":
        inner = rank(value.input, depth + 1)
        return inner - 1 if inner is not None and value["dim"] is not None else None
    if op == "flatten":
        inner = rank(value.input, depth + 1)
        start, end = number(value["start_dim"]), number(value["end_dim"])
        if inner is None or start is None and value["start_dim"] is not None:
            return None
        start, end = int(start or 0) % inner, int(end if end is not None else -1) % inner
        return inner - (end - start) if end >= start else None
    if op == "rearrange":
        return _rearranged(value["pattern"])
    return None


def _shape_length(shape) -> Optional[int]:
    """The length of a shape given as ``view(a, b, c)`` or ``view((a, b, c))``; None for
    ``view(shape)`` or ``view(*shape)`` (a shape held elsewhere)."""
    if shape is None or shape.op != "tuple":
        return None
    items = shape.items
    if len(items) == 1 and items[0].op in ("tuple", "list"):
        items = items[0].items
    elif len(items) == 1 and items[0].op not in ("const", "item", "size", "mul", "add", "sub", "floordiv", "neg"):
        return None  # one name: perhaps a whole shape
    if not items or any(item.op not in SIZES for item in items):
        return None
    return len(items)


def _rearranged(pattern) -> Optional[int]:
    """The output rank of an einops pattern (``"b n (h d) -> (b h) n d"``: 3), None with ``...``."""
    text = pattern.name if pattern is not None and pattern.op == "str" else None
    if not text or text.count("->") != 1:
        return None
    right = text.split("->")[1]
    if "..." in right or "…" in right:
        return None
    count, depth = 0, 0
    for token in right.replace("(", " ( ").replace(")", " ) ").split():
        if token == "(":
            count += depth == 0
            depth += 1
        elif token == ")":
            depth -= 1
        elif depth == 0:
            count += 1
    return count if depth == 0 else None
