"""The ops of the dataflow view: every value's ``op`` is one ``Op``.

A value is built with its op named by a member (``Value(Op.SQUARE, ...)``) and matchers ask for
members (``value.op == Op.SQUARE``, ``value.is_(Op.ADD, Op.SUB)``), so a misspelt op is an
``AttributeError`` where it is written, never a comparison that silently matches nothing.
``Value`` refuses an op that is not a member, so a table (``spellings``) or a rule that names a new
op must declare it here first. An ``Op`` is a ``str`` (its value), so it compares, hashes, prints
and formats as the op's name and the spellings tables can name ops by their text.
"""

from __future__ import annotations

from enum import Enum


class Op(str, Enum):
    # -- values the view makes (names, constants, control flow, modules known at run time)
    PARAM = "param"
    FREE = "free"
    NAME = "name"
    CONST = "const"
    STR = "str"
    TUPLE = "tuple"
    UNPACK = "unpack"
    SLICE = "slice"
    PHI = "phi"
    COMPARE = "compare"
    OPAQUE = "opaque"
    FUNCTION = "function"
    CALL = "call"
    ATTR = "attr"
    GETITEM = "getitem"
    ITEM = "item"
    SAME = "same"
    CAST = "cast"
    ACT = "act"
    # -- tensor ops (spellings and normalisations)
    ADD = "add"
    AMAX = "amax"
    BADDBMM = "baddbmm"
    CAT = "cat"
    CHANNELS = "channels"
    CHUNK = "chunk"
    CLAMP = "clamp"
    COS = "cos"
    DIV = "div"
    DROPOUT = "dropout"
    EINSUM = "einsum"
    EXPAND = "expand"
    FLATTEN = "flatten"
    FLOORDIV = "floordiv"
    FULL = "full"
    GATHER = "gather"
    GELU = "gelu"
    INVERT = "invert"
    LINEAR = "linear"
    MASKED_FILL = "masked_fill"
    MATMUL = "matmul"
    MAX = "max"
    MEAN = "mean"
    MOD = "mod"
    MUL = "mul"
    NDIM = "ndim"
    NEG = "neg"
    PERMUTE = "permute"
    POW = "pow"
    REARRANGE = "rearrange"
    RELU = "relu"
    REPEAT_INTERLEAVE = "repeat_interleave"
    RESHAPE = "reshape"
    RESHAPE_AS = "reshape_as"
    RMS_NORM = "rms_norm"
    RMS_NORM_MODULE = "rms_norm_module"
    RSQRT = "rsqrt"
    SCATTER = "scatter"
    SDPA = "sdpa"
    SIGMOID = "sigmoid"
    SILU = "silu"
    SIN = "sin"
    SIZE = "size"
    SOFTMAX = "softmax"
    SPLIT = "split"
    SQRT = "sqrt"
    SQUARE = "square"
    SQUEEZE = "squeeze"
    STACK = "stack"
    SUB = "sub"
    SUM = "sum"
    T = "t"
    TANH = "tanh"
    TENSOR = "tensor"
    TOPK = "topk"
    TRANSPOSE = "transpose"
    TRANSPOSED = "transposed"
    UNBIND = "unbind"
    UNFLATTEN = "unflatten"
    UNSQUEEZE = "unsqueeze"
    VIEW_AS_COMPLEX = "view_as_complex"
    VIEW_AS_REAL = "view_as_real"
    WHERE = "where"
    ZEROS_LIKE = "zeros_like"

    __hash__ = str.__hash__  # Enum hashes the member's name; an op hashes as its text
    __str__ = str.__str__
    __format__ = str.__format__


#: text -> member, for ``Value`` (which accepts a member or its text and keeps the member)
BY_TEXT = {op.value: op for op in Op}
