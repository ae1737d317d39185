"""A model's inputs, from its ``forward`` signature and how the body uses each argument.

Arguments with a default are left at it. A required one is read, in order, from its first use as
the argument of a submodule (``self.wte(idx)``: an ``nn.Embedding`` takes token ids below its
vocabulary; an ``nn.Conv2d`` or a ``Rearrange('b c (h p1) (w p2) ...')`` images of its channels;
an ``nn.Conv1d`` audio features; an ``nn.Linear`` or a norm features of its width), then from its
name (``input_ids``, ``pixel_values``, ``mel``, ``timesteps``, ``attention_mask``, ...) and the
model's sizes. What none of these tells is a ``TODO`` naming the argument and where it is used.
A model whose forward takes a KV cache gets a decode style (``parity.init.harness.Decode``); one
whose forward takes a padding mask (``parity.init.masks``) over a sequence input gets a left-padded
case (``parity.init.harness.Padded``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import libcst as cst

from .construct import Construction, todo
from .masks import MASKS, mask_style
from .reach import Reach
from .sizes import IMAGE, VOCAB, group, literal
from .source import ClassInfo, Function, Tree, code_of, dotted, first_use

BATCH, SEQUENCE, AUDIO_FRAMES = 2, 16, 32

TOKENS = ("idx", "input_ids", "tokens", "token_ids", "ids", "input_tokens", "text", "src_tokens", "seq_ids")
IMAGES = ("img", "image", "images", "pixel_values", "imgs", "pixels")
VIDEO = ("video", "videos")
AUDIO = ("audio", "wav", "waveform", "raw_audio", "wave", "signal")
FEATURES = ("mel", "mels", "spec", "spectrogram", "input_features", "fbank", "log_mel")
TIMES = ("time", "times", "t", "timestep", "timesteps", "noise_level", "sigma", "sigmas")
POSITIONS = ("position_ids", "positions", "pos", "input_pos", "pos_ids")
CHANNELS = ("channels", "in_chans", "num_channels", "in_channels", "image_channels", "n_channels")
PRIMARY = TOKENS + IMAGES + VIDEO + AUDIO + FEATURES
EINOPS = ("rearrange", "reduce", "repeat", "pack", "unpack")
# an annotation that says the argument is no tensor (a spec declares tensors only)
NOT_TENSOR = r"(typing\.)?(Optional\[)?(List|list|Sequence|Tuple|tuple|Dict|dict|int|float|str|bool)\b"
MELS = ("n_mels", "num_mel_bins", "n_mel", "mel_bins", "feature_size", "input_dim", "n_fft_bins")


@dataclass
class Inputs:
    tensors: Dict[str, Any] = field(default_factory=dict)  # name -> TensorSpec mapping, or a TODO string
    todos: List[str] = field(default_factory=list)
    decode: Optional[str] = None  # "hf", "start_pos", "input_pos": the KV-cache style of the forward
    tokens: Optional[str] = None  # the argument holding token ids (the decode case splits it)
    output: Optional[str] = None  # the output field to compare and train on (``logits`` of an output class)
    mask: Optional[str] = None  # the padding mask argument (the padded case passes a left-padded one)
    mask_style: str = "keep"  # how the forward takes it (parity.init.masks.STYLES)
    sequence: Optional[str] = None  # the input whose first dimensions are batch and sequence (what is padded)


def evaluate(node: Optional[cst.BaseExpression], values: Dict[str, Any]) -> Optional[int]:
    """An integer size expression over the constructor's names and configuration fields."""
    if node is None:
        return None
    value = literal(node)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    name = dotted(node)
    if name is not None:
        found = values.get(name.split(".")[-1])
        return found if isinstance(found, int) and not isinstance(found, bool) else None
    if isinstance(node, cst.BinaryOperation):
        a, b = evaluate(node.left, values), evaluate(node.right, values)
        if a is None or b is None:
            return None
        op = type(node.operator).__name__
        return {"Add": a + b, "Subtract": a - b, "Multiply": a * b,
                "FloorDivide": a // b if b else None}.get(op)
    if isinstance(node, cst.Call) and dotted(node.func) == "int" and node.args:
        return evaluate(node.args[0].value, values)
    return None


def _first(values: Dict[str, Any], names, default: int) -> int:
    for name in names:
        if isinstance(values.get(name), int) and not isinstance(values.get(name), bool):
            return values[name]
    return default


def _size(values: Dict[str, Any], kind: str, default: int) -> int:
    for name, value in values.items():
        if group(name) == kind and isinstance(value, int) and not isinstance(value, bool):
            return value
    return default


def tokens(high: int) -> dict:
    return {"shape": [BATCH, SEQUENCE], "dtype": "int64", "high": high}


class _Submodules(cst.CSTVisitor):
    """``self.attr = Ctor(args...)`` in a constructor."""

    def __init__(self):
        self.found: Dict[str, cst.Call] = {}

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            name = dotted(target.target)
            if name and name.startswith("self.") and isinstance(node.value, cst.Call):
                self.found.setdefault(name[5:], node.value)


class _FirstCall(cst.CSTVisitor):
    """The first ``self.attr(name, ...)`` call and the rank ``a, b, c = name.shape`` gives."""

    def __init__(self, name: str):
        self.name = name
        self.attr: Optional[str] = None
        self.rank: Optional[int] = None
        self.starred: Optional[tuple] = None  # (the starred name, the other elements) of ``b, *axis, c = x.shape``
        self.starred_size: Optional[cst.BaseExpression] = None

    def visit_Call(self, node: cst.Call) -> None:
        func = (dotted(node.func) or "").split(".")[-1]
        if self.rank is None and func in EINOPS and len(node.args) > 1 and isinstance(node.args[0].value, cst.Name) \
                and node.args[0].value.value == self.name:
            pattern = literal(node.args[1].value)
            if isinstance(pattern, str) and "->" in pattern and "..." not in pattern.split("->")[0]:
                # rearrange(x, "b n (h d) -> ..."): its rank ("b ... d" tells none)
                self.rank = len(pattern.split("->")[0].replace("(", " ( ").split()) - 2 * pattern.split("->")[0].count("(")
        if self.attr is None and node.args and isinstance(node.args[0].value, cst.Name) \
                and node.args[0].value.value == self.name:
            func = dotted(node.func)
            if func and func.startswith("self.") and func.count(".") == 1:
                self.attr = func[5:]

    def visit_Assign(self, node: cst.Assign) -> None:
        value, extra = node.value, 0
        if isinstance(value, cst.Tuple) and value.elements and isinstance(value.elements[0], cst.StarredElement):
            value, extra = value.elements[0].value, len(value.elements) - 1  # b, *axis, c, device = *x.shape, x.device
        base = value.func.value if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
            and value.func.attr.value == "size" else value.value if isinstance(value, cst.Attribute) \
            and value.attr.value == "shape" else None
        if self.rank is None and isinstance(base, cst.Name) and base.value == self.name \
                and isinstance(node.targets[0].target, cst.Tuple):
            elements = node.targets[0].target.elements
            elements = elements[:len(elements) - extra]
            starred = [e for e in elements if isinstance(e, cst.StarredElement)]
            if not starred:
                self.rank = len(elements)
            elif len(starred) == 1 and isinstance(starred[0].value, cst.Name):  # b, *axis, c = x.shape
                self.starred = (starred[0].value.value, len(elements) - 1)

    def visit_Assert(self, node: cst.Assert) -> None:
        """``assert len(axis) == self.input_axis`` after ``b, *axis, c = x.shape``: the rank, once
        the compared size is known (``rank_of``)."""
        test = node.test
        if self.starred and isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
                and isinstance(test.comparisons[0].operator, cst.Equal) and isinstance(test.left, cst.Call) \
                and dotted(test.left.func) == "len" and test.left.args \
                and dotted(test.left.args[0].value) == self.starred[0]:
            self.starred_size = test.comparisons[0].comparator

    def rank_of(self, values: Dict[str, Any]) -> Optional[int]:
        if self.starred and self.starred_size is not None:
            size = evaluate(self.starred_size, values)
            return None if size is None else size + self.starred[1]
        return self.rank


class InputReader:
    def __init__(self, tree: Tree, reach: Reach):
        self.tree = tree
        self.reach = reach

    def read(self, model: ClassInfo, built: Construction) -> Inputs:
        result = Inputs()
        forward = self.reach.method(model, "forward")
        if forward is None:
            result.todos.append(todo(f"the inputs of {model.name} ({model.where}), which has no forward", model.where))
            return result
        params = [p for p in forward.params() if p.name.value != "self" and p.star not in ("*", "**")]
        names = {p.name.value for p in params}
        if {"past_key_values", "use_cache"} <= names:
            result.decode = "hf"
        elif "start_pos" in names:
            result.decode = "start_pos"
        elif "input_pos" in names and self.reach.method(model, "set_kv_cache") is not None:
            result.decode = "input_pos"
        submodules = self._submodules(model)
        for p in params:
            name = p.name.value
            primary = name.lower() in PRIMARY and literal(p.default) is None  # input_ids=None: still the input
            if (p.default is not None and not primary) or name in ("start_pos",):
                continue
            annotation = code_of(p.annotation.annotation).strip() if p.annotation is not None else ""
            plain = re.match(NOT_TENSOR, annotation) is not None
            if plain and p.default is not None:
                continue  # images: Optional[List[Tensor]] = None: left at its default
            spec = None if plain else self._tensor(name, forward, submodules, built.values)
            if spec is None and plain:  # seqlens: List[int]: no tensor parity can declare
                spec = todo(f"input {name!r} of {model.name}.forward ({forward.where}), annotated {annotation}: "
                            f"a value of that type (a spec declares tensors; build it in the harness)",
                            self._use(forward, name))
                result.todos.append(spec)
            elif spec is None:
                spec = todo(f"input {name!r} of {model.name}.forward ({forward.where}): its shape and dtype, as "
                            f"{{shape: [...], dtype: ...}}", self._use(forward, name))
                result.todos.append(spec)
            result.tensors[name] = spec
            if isinstance(spec, dict) and spec.get("dtype") == "int64" and result.tokens is None \
                    and spec["shape"] == [BATCH, SEQUENCE]:
                result.tokens = name
        if result.decode and result.tokens is None:
            result.decode = None
        result.sequence = result.tokens or next((n for n, t in result.tensors.items() if isinstance(t, dict)
                                                 and t["shape"][:2] == [BATCH, SEQUENCE]), None)
        mask = next((p.name.value for p in params if p.name.value.lower() in MASKS), None)
        if mask is not None and result.sequence is not None and result.sequence != mask:
            result.mask, result.mask_style = mask, mask_style(forward, mask)
        return result

    def _submodules(self, model: ClassInfo) -> Dict[str, cst.Call]:
        visitor = _Submodules()
        for owner in [model, *self.reach.bases(model)]:
            init = owner.methods.get("__init__")
            if init is not None:
                init.node.visit(visitor)
        return visitor.found

    def _use(self, forward: Function, name: str) -> str:
        return first_use(self.tree, forward, name)

    def _tensor(self, name: str, forward: Function, submodules: Dict[str, cst.Call], values: Dict[str, Any]):
        use = _FirstCall(name)
        forward.node.body.visit(use)
        rank = use.rank_of(values)
        if rank is not None and rank >= 4 and use.starred:  # b, *axis, c: the axes between batch and channels
            return {"shape": [BATCH, *[IMAGE // 4] * (rank - 2), _first(values, CHANNELS + ("input_channels",), 3)]}
        if use.attr in submodules:
            found = self._by_module(submodules[use.attr], values)
            if found is not None and rank == 4 and found["shape"] == [BATCH, SEQUENCE, found["shape"][-1]]:
                # b, c, h, w = x.shape: features of that width over the channels of an image (a channel norm)
                return {"shape": [BATCH, found["shape"][-1], IMAGE // 4, IMAGE // 4]}
            if found is not None:
                return found
        lower = name.lower()
        vocab = _size(values, "vocab", VOCAB)
        if lower in TOKENS or lower.endswith("_ids") and lower not in POSITIONS:
            return tokens(vocab)
        if lower in ("labels", "targets", "target", "y") and use.rank != 3:
            return tokens(vocab)
        image = _size(values, "image", IMAGE)
        channels = _first(values, CHANNELS, 3)
        if lower in IMAGES or (lower == "x" and any(group(n) == "image" for n in values)):
            return {"shape": [BATCH, channels, image, image]}
        if lower in VIDEO:
            return {"shape": [BATCH, channels, _size(values, "frames", 4), image, image]}
        if lower in AUDIO:
            return {"shape": [BATCH, AUDIO_FRAMES * 50]}
        if lower in FEATURES:
            return {"shape": [BATCH, _first(values, MELS, 16), AUDIO_FRAMES]}
        if lower in TIMES:
            return {"shape": [BATCH], "low": 0.0, "high": 1.0}
        if lower in MASKS:
            return {"shape": [BATCH, SEQUENCE], "dtype": "int64", "low": 1, "high": 2}
        if lower in POSITIONS:
            return {"shape": [BATCH, SEQUENCE], "dtype": "int64", "high": SEQUENCE}
        width = _size(values, "width", 0)
        if width and use.rank in (None, 3):
            return {"shape": [BATCH, SEQUENCE, width]}
        return None

    def _by_module(self, call: cst.Call, values: Dict[str, Any]):
        kind = (dotted(call.func) or "").split(".")[-1]
        first = evaluate(call.args[0].value, values) if call.args else None
        if kind == "Embedding" and first:
            return tokens(first)
        if kind in ("Conv2d", "Conv3d") and first:
            image = _size(values, "image", IMAGE)
            extra = [_size(values, "frames", 4)] if kind == "Conv3d" else []
            return {"shape": [BATCH, first, *extra, image, image]}
        if kind == "Conv1d" and first:
            return {"shape": [BATCH, first, AUDIO_FRAMES]}
        if kind in ("Linear", "LayerNorm", "RMSNorm") and first:
            return {"shape": [BATCH, SEQUENCE, first]}
        if kind == "Sequential" and call.args:
            inner = call.args[0].value
            if isinstance(inner, cst.Call):
                pattern = literal(inner.args[0].value) if dotted(inner.func) and inner.args else None
                if isinstance(pattern, str) and pattern.replace(" ", "").startswith("bc(h"):
                    image = _size(values, "image", IMAGE)
                    return {"shape": [BATCH, _first(values, CHANNELS, 3), image, image]}
                return self._by_module(inner, values)
        return None
