"""The emulated torch_npu ops as real dispatcher ops: ``torch.ops.npu.<name>``, as torch_npu has them.

``register()`` defines every op of the registry in the ``npu`` namespace with ``torch.library``,
from its real torch_npu 2.14.0 schema (``opmap/reference/torch_npu_2.14.0_op_schemas.txt``, tags
included), and gives each one

* its kernel for the CPU and CUDA dispatch keys (the backing devices);
* a fake (meta) implementation with the real output shapes and dtypes, so that FakeTensor
  tracing, ``torch.compile`` and ``torch.export`` see the op as one opaque node: the op's
  ``OpSpec.fake``, or the kernel itself on the fake tensors with its value checks skipped;
* where the real op has a backward (``OpSpec.derivative``), an Autograd kernel that saves what the
  formula needs and calls the op's backward op (``torch.ops.npu.npu_rms_norm_backward``, ...,
  registered the same way), so the backward pass is traceable too. Ops without one get no
  Autograd kernel: their kernels refuse grad-requiring inputs, as on a real NPU.

The emulated ``torch_npu`` module then exposes ``torch_npu.<name> = torch.ops.npu.<name>`` (the
real package re-exports its ops the same way).

Rules: registration happens once per process (the first ``kernels.activate()``), is idempotent,
and stays after the emulation is left (an op cannot be unregistered without invalidating what was
compiled with it); it never happens while a real torch_npu is importable, and an op that is
already defined in the namespace (by a real torch_npu) is left alone.
"""

from __future__ import annotations

import inspect
import re
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from ._checks import shapes_only
from .emulation import real_torch_npu_installed
from .registry import OpSpec, specs
from ..opmap import reference

NAMESPACE = "npu"
DEVICE_KEYS = ("CPU", "CUDA")

_lock = threading.Lock()
_library: Optional[torch.library.Library] = None
#: the ops this process defined (name.overload), for the tests and the report
DEFINED: List[str] = []


def schema_lines() -> Dict[str, List[Tuple[str, str, Tuple[str, ...]]]]:
    """op name -> [(overload, schema text, tags)] from the reference file."""
    found: Dict[str, List[Tuple[str, str, Tuple[str, ...]]]] = {}
    for line in reference.lines(reference.OP_SCHEMAS):
        match = re.match(r"^\[\w+\]\s+(\w+)(?:\.(\w+))?\(", line)
        if not match:
            continue
        text, _, notes = line.partition("   #")
        text = text.split("]", 1)[1].strip()
        tags = tuple(re.findall(r"tags=([\w,]+)", notes)[0].split(",")) if "tags=" in notes else ()
        found.setdefault(match.group(1), []).append((match.group(2) or "", text, tags))
    return found


def _overloads(spec: OpSpec, lines) -> List[Tuple[str, str, Tuple[str, ...]]]:
    """The schema overloads the kernel can be called with: its positional parameters, keyword-only
    ones among its own (``npu_grouped_matmul.List``); never ``.out``."""
    params = inspect.signature(spec.fn).parameters
    positional = [n for n, p in params.items() if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    chosen = []
    for overload, text, tags in lines:
        arguments = torch._C.parse_schema(text).arguments
        if overload == "out" or [a.name for a in arguments if not a.kwarg_only] != positional:
            continue
        if all(a.name in params for a in arguments):
            chosen.append((overload, text, tags))
    return chosen


def _defined_elsewhere(name: str) -> bool:
    try:
        getattr(getattr(torch.ops, NAMESPACE), name)
    except (AttributeError, RuntimeError):
        return False
    return True


def register() -> bool:
    """Define the emulated ops in ``torch.ops.npu`` (once per process); False, with nothing
    defined, when a real torch_npu is importable."""
    global _library
    with _lock:
        if _library is not None:
            return True
        if real_torch_npu_installed():
            return False
        library = torch.library.Library(NAMESPACE, "FRAGMENT")
        lines = schema_lines()
        for name, spec in specs().items():
            if _defined_elsewhere(name):
                continue
            for overload, text, tags in _overloads(spec, lines.get(name, [])):
                _define(library, spec, overload, text, tags)
        _library = library
        return True


def _define(library: torch.library.Library, spec: OpSpec, overload: str, text: str, tags: Tuple[str, ...]) -> None:
    qualified = spec.name + (f".{overload}" if overload else "")
    library.define(text, tags=tuple(getattr(torch.Tag, t) for t in tags))
    kernel = _kernel(spec)
    for key in DEVICE_KEYS:
        library.impl(qualified, kernel, key)
    torch.library.register_fake(f"{NAMESPACE}::{qualified}", _fake(spec), lib=library)
    if spec.derivative is not None:
        op = getattr(getattr(torch.ops, NAMESPACE), spec.name)
        op = getattr(op, overload or "default")
        library.impl(qualified, _autograd_kernel(spec, op), "Autograd", with_keyset=True)
    DEFINED.append(qualified)


def _kernel(spec: OpSpec) -> Callable:
    """The kernel as the dispatcher calls it. An output that IS an input (npu_apply_rotary_pos_emb
    updates query and key in place and returns them, while its schema declares no alias) comes
    back as a copy: the dispatcher does not allow an op to return an input it does not alias."""
    fn = spec.fn

    def kernel(*args, **kwargs):
        outputs = fn(*args, **kwargs)
        inputs = [id(a) for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        if isinstance(outputs, tuple) and any(id(o) in inputs for o in outputs):
            return tuple(o.clone() if id(o) in inputs else o for o in outputs)
        return outputs

    kernel.__name__ = f"{spec.name}_kernel"
    return kernel


def _fake(spec: OpSpec) -> Callable:
    if spec.fake is not None:
        return spec.fake
    fn = spec.fn

    def fake(*args, **kwargs):
        with shapes_only():
            return fn(*args, **kwargs)

    fake.__name__ = f"{spec.name}_fake"
    return fake


def _autograd_kernel(spec: OpSpec, op: torch._ops.OpOverload) -> Callable:
    """The Autograd kernel: record ``spec.derivative`` when a positional tensor needs a gradient."""
    signature = inspect.signature(spec.fn)
    positional = [p.name for p in signature.parameters.values() if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    derivative = spec.derivative

    def below(keyset, args, kwargs):
        with torch._C._AutoDispatchBelowAutograd():
            return op.redispatch(keyset & torch._C._after_autograd_keyset, *args, **kwargs)

    def forward(ctx, keyset, kwargs, *args):
        outputs = below(keyset, args, kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        derivative.save(ctx, dict(bound.arguments), outputs)
        return outputs

    def backward(ctx, *grads):
        named = derivative.grads(ctx, *grads)
        return (None, None, *(named.get(name) for name in positional))

    # torch_npu's node names: npu_rms_norm -> NpuRmsNormBackward
    node = type("".join(part.capitalize() for part in spec.name.split("_")), (torch.autograd.Function,),
                {"forward": staticmethod(forward), "backward": staticmethod(backward)})

    def autograd_kernel(keyset, *args, **kwargs):
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return node.apply(keyset, kwargs, *args)
        return below(keyset, args, kwargs)

    return autograd_kernel


def op(name: str) -> Any:
    """``torch.ops.npu.<name>`` (the OpOverloadPacket)."""
    return getattr(getattr(torch.ops, NAMESPACE), name)
