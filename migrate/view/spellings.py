"""The spellings of one op, declared once: function, method, operator and module forms → one
canonical op with named arguments.

``FUNCTIONS`` maps a qualified function (or module class called on a tensor) to ``(op,
parameters)``; ``METHODS`` maps a tensor method to ``(op, parameters after self)``; ``OPERATORS``
maps libcst operator classes to ops. A parameter named ``*rest`` collects the remaining positional
arguments (``permute(0, 1, 3, 2)``). The view (``view.build``) builds values from these tables and then
applies the normalisations of ``view.normal`` (``x * x`` → ``square``, ``1 / sqrt`` → ``rsqrt``, ...),
so a matcher asks for one op, not for each spelling.
"""

from __future__ import annotations

from typing import Dict, Tuple

import libcst as cst

from .ops import BY_TEXT

Spec = Tuple[str, Tuple[str, ...]]

FUNCTIONS: Dict[str, Spec] = {
    "torch.matmul": ("matmul", ("input", "other")),
    "torch.bmm": ("matmul", ("input", "other")),  # (mat2 is called other: one name per operand)
    "torch.baddbmm": ("baddbmm", ("input", "batch1", "batch2", "beta", "alpha")),
    "torch.einsum": ("einsum", ("equation", "*rest")),
    "torch.softmax": ("softmax", ("input", "dim", "dtype")),
    "torch.nn.functional.softmax": ("softmax", ("input", "dim", "_stacklevel", "dtype")),
    "torch.special.softmax": ("softmax", ("input", "dim", "dtype")),
    "torch.nn.functional.dropout": ("dropout", ("input", "p", "training", "inplace")),
    "torch.transpose": ("transpose", ("input", "dim0", "dim1")),
    "torch.permute": ("permute", ("input", "dims")),
    "torch.rsqrt": ("rsqrt", ("input",)),
    "torch.sqrt": ("sqrt", ("input",)),
    "torch.mean": ("mean", ("input", "dim", "keepdim", "dtype", "axis")),
    "torch.square": ("square", ("input",)),
    "torch.pow": ("pow", ("input", "exponent")),
    "torch.mul": ("mul", ("input", "other")),
    "torch.div": ("div", ("input", "other")),
    "torch.add": ("add", ("input", "other")),
    "torch.sub": ("sub", ("input", "other")),
    "torch.neg": ("neg", ("input",)),
    "torch.tanh": ("tanh", ("input",)),
    "torch.sigmoid": ("sigmoid", ("input",)),
    "torch.nn.functional.sigmoid": ("sigmoid", ("input",)),
    "torch.nn.functional.silu": ("silu", ("input", "inplace")),
    "torch.nn.functional.gelu": ("gelu", ("input", "approximate")),
    "torch.cat": ("cat", ("tensors", "dim")),
    "torch.concat": ("cat", ("tensors", "dim")),
    "torch.concatenate": ("cat", ("tensors", "axis")),
    "torch.stack": ("stack", ("tensors", "dim")),
    "torch.chunk": ("chunk", ("input", "chunks", "dim")),
    "torch.split": ("split", ("tensor", "split_size_or_sections", "dim")),
    "torch.topk": ("topk", ("input", "k", "dim", "largest", "sorted")),
    "torch.where": ("where", ("condition", "input", "other")),
    "torch.masked_fill": ("masked_fill", ("input", "mask", "value")),
    "torch.flatten": ("flatten", ("input", "start_dim", "end_dim")),
    "torch.reshape": ("reshape", ("input", "shape")),
    "torch.view_as_complex": ("view_as_complex", ("input",)),
    "torch.view_as_real": ("view_as_real", ("input",)),
    "torch.cos": ("cos", ("input",)),
    "torch.sin": ("sin", ("input",)),
    "torch.repeat_interleave": ("repeat_interleave", ("input", "repeats", "dim")),
    "torch.full": ("full", ("size", "fill_value", "dtype", "device", "requires_grad", "layout", "out")),
    "torch.tensor": ("tensor", ("data", "dtype", "device", "requires_grad", "pin_memory")),
    "torch.nn.functional.rms_norm": ("rms_norm", ("input", "normalized_shape", "weight", "eps")),
    "torch.rms_norm": ("rms_norm", ("input", "normalized_shape", "weight", "eps")),
    "torch.nn.functional.linear": ("linear", ("input", "weight", "bias")),
    "torch.unflatten": ("unflatten", ("input", "dim", "sizes")),
    "einops.rearrange": ("rearrange", ("input", "pattern", "*rest")),  # axis sizes as keywords (r=2)
    "torch.unbind": ("unbind", ("input", "dim")),
    "torch.gather": ("gather", ("input", "dim", "index")),
    "torch.sum": ("sum", ("input", "dim", "keepdim", "dtype")),
    "torch.amax": ("amax", ("input", "dim", "keepdim")),
    "torch.logical_not": ("invert", ("input",)),
    "torch.zeros_like": ("zeros_like", ("input", "dtype", "layout", "device", "requires_grad", "memory_format")),
    "torch.relu": ("relu", ("input",)),
    "torch.clamp": ("clamp", ("input", "min", "max")),
    "torch.nn.functional.relu": ("relu", ("input", "inplace")),
    "torch.nn.functional.scaled_dot_product_attention": (
        "sdpa", ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")),
}

METHODS: Dict[str, Spec] = {
    "matmul": ("matmul", ("other",)),
    "bmm": ("matmul", ("other",)),
    "baddbmm": ("baddbmm", ("batch1", "batch2", "beta", "alpha")),
    "softmax": ("softmax", ("dim", "dtype")),
    "transpose": ("transpose", ("dim0", "dim1")),
    "permute": ("permute", ("*rest",)),
    "t": ("t", ()),
    "rsqrt": ("rsqrt", ()),
    "sqrt": ("sqrt", ()),
    "mean": ("mean", ("dim", "keepdim", "dtype", "axis")),
    "square": ("square", ()),
    "pow": ("pow", ("exponent",)),
    "mul": ("mul", ("other",)),
    "div": ("div", ("other",)),
    "add": ("add", ("other",)),
    "sub": ("sub", ("other",)),
    "neg": ("neg", ()),
    "tanh": ("tanh", ()),
    "sigmoid": ("sigmoid", ()),
    "masked_fill": ("masked_fill", ("mask", "value")),
    "chunk": ("chunk", ("chunks", "dim")),
    "split": ("split", ("split_size", "dim")),
    "unbind": ("unbind", ("dim",)),
    "topk": ("topk", ("k", "dim", "largest", "sorted")),
    "flatten": ("flatten", ("start_dim", "end_dim")),
    "view": ("reshape", ("*rest",)),
    "reshape": ("reshape", ("*rest",)),
    "reshape_as": ("reshape_as", ("other",)),
    "unflatten": ("unflatten", ("dim", "sizes")),
    "expand": ("expand", ("*rest",)),
    "expand_as": ("expand", ("other",)),
    "contiguous": ("same", ()),
    "clone": ("same", ()),
    "unsqueeze": ("unsqueeze", ("dim",)),
    "squeeze": ("squeeze", ("dim",)),
    "repeat_interleave": ("repeat_interleave", ("repeats", "dim")),
    "float": ("cast", ()),
    "half": ("cast", ()),
    "bfloat16": ("cast", ()),
    "double": ("cast", ()),
    "to": ("cast", ("dtype",)),
    "type": ("cast", ("dtype",)),
    "type_as": ("cast", ("other",)),
    "cos": ("cos", ()),
    "sin": ("sin", ()),
    "sum": ("sum", ("dim", "keepdim", "dtype")),
    "size": ("size", ("dim",)),
    "dim": ("ndim", ()),
    "scatter": ("scatter", ("dim", "index", "src")),
    "gather": ("gather", ("dim", "index")),
    "max": ("max", ("dim", "keepdim")),
    "amax": ("amax", ("dim", "keepdim")),
    "logical_not": ("invert", ()),
    "relu": ("relu", ()),
    "clamp": ("clamp", ("min", "max")),
}

#: the dtype a cast method names without an argument
CAST_METHODS = {"float": "torch.float32", "half": "torch.float16", "bfloat16": "torch.bfloat16",
                "double": "torch.float64"}

#: nn.Module classes whose instances, called on a tensor, compute an op (``self.act = nn.SiLU()``)
MODULES: Dict[str, Spec] = {
    "torch.nn.SiLU": ("silu", ("input",)),
    "torch.nn.GELU": ("gelu", ("input",)),
    "torch.nn.Softmax": ("softmax", ("input",)),  # dim from the constructor
    "torch.nn.Dropout": ("dropout", ("input",)),
    "torch.nn.modules.dropout.Dropout": ("dropout", ("input",)),
    "torch.nn.Sigmoid": ("sigmoid", ("input",)),
    "torch.nn.Tanh": ("tanh", ("input",)),
    "torch.nn.ReLU": ("relu", ("input",)),
    "torch.nn.Linear": ("linear", ("input",)),
    "torch.nn.RMSNorm": ("rms_norm_module", ("input",)),
}

#: ops of one tensor that a function computes when a module attribute is bound to it in ``__init__``
#: (``self.activation_func = F.silu``, then ``self.activation_func(x)``)
ATTRIBUTE_FUNCTIONS = frozenset({"silu", "gelu", "relu", "sigmoid", "tanh"})

OPERATORS = {
    cst.Multiply: "mul", cst.Divide: "div", cst.Add: "add", cst.Subtract: "sub", cst.MatrixMultiply: "matmul",
    cst.Power: "pow", cst.FloorDivide: "floordiv", cst.Modulo: "mod",
}
UNARY = {cst.BitInvert: "invert"}
AUGMENTED = {
    cst.MultiplyAssign: "mul", cst.DivideAssign: "div", cst.AddAssign: "add", cst.SubtractAssign: "sub",
    cst.MatrixMultiplyAssign: "matmul", cst.PowerAssign: "pow",
}

_UNDECLARED = sorted({spec[0] for table in (FUNCTIONS, METHODS, MODULES) for spec in table.values()}
                     .union(OPERATORS.values(), UNARY.values(), AUGMENTED.values(), ATTRIBUTE_FUNCTIONS) - set(BY_TEXT))
if _UNDECLARED:  # a spelling of an op the view does not know: fail at import, where it was written
    raise ValueError(f"spellings of undeclared ops {_UNDECLARED}: declare them in migrate/view/ops.py")
