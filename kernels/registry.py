"""Registry of the emulated torch_npu ops.

Each kernel module decorates its public functions with ``@npu_op`` (or ``@npu_op(...)`` with the
op's fake implementation and autograd formula); the emulated ``torch_npu`` module, the dispatcher
registration (``kernels.dispatcher``) and the schema conformance test read it. ``load_all``
imports every module of the package once so that the registry is complete without a hand-kept list.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional


@dataclass(frozen=True)
class Derivative:
    """The autograd formula of an op with a backward on a real NPU (an autograd node in
    ``torch_npu_autograd_nodes.txt``): the analogue of its derivatives.yaml entry.

    ``save(ctx, args, outputs)`` keeps what the backward needs (``args``: every argument by name,
    defaults filled in) and marks the outputs that get no gradient; ``grads(ctx, *output_grads)``
    returns ``{input name: gradient}``, computed by the op's backward op through the dispatcher.
    """

    save: Callable[[Any, Dict[str, Any], Any], None]
    grads: Callable[..., Dict[str, Any]]


@dataclass(frozen=True)
class OpSpec:
    """One emulated op. ``fake``: output shapes/dtypes for FakeTensor/meta tracing, same signature
    as the op; None: the kernel itself runs on the fake tensors, inside ``_checks.shapes_only()``
    (its checks of tensor values skipped, see ``_checks.reads_values``). ``derivative``: None when
    the real op has no backward; the kernel then refuses grad inputs."""

    fn: Callable
    fake: Optional[Callable] = None
    derivative: Optional[Derivative] = None

    @property
    def name(self) -> str:
        return self.fn.__name__


#: name -> kernel function (the real torch_npu name)
OPS: Dict[str, Callable] = {}
#: name -> the op's spec
SPECS: Dict[str, OpSpec] = {}


def npu_op(fn: Optional[Callable] = None, *, fake: Optional[Callable] = None,
           derivative: Optional[Derivative] = None):
    """Register ``fn`` under its own name (which must be the real torch_npu name):
    ``@npu_op`` or ``@npu_op(fake=..., derivative=...)``."""

    def register(fn: Callable) -> Callable:
        if fn.__name__ in OPS:
            raise RuntimeError(f"emulated op {fn.__name__} registered twice")
        OPS[fn.__name__] = fn
        SPECS[fn.__name__] = OpSpec(fn, fake, derivative)
        return fn

    return register(fn) if fn is not None else register


_loaded = False


def load_all() -> Dict[str, Callable]:
    global _loaded
    if not _loaded:
        from npu_migrate import kernels

        for info in pkgutil.iter_modules(kernels.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"npu_migrate.kernels.{info.name}")
        _loaded = True
    return OPS


def specs() -> Dict[str, OpSpec]:
    load_all()
    return SPECS
