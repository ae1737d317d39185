"""Registry of the emulated torch_npu ops.

Each kernel module decorates its public functions with ``@npu_op`` (or ``@npu_op(...)`` with the
op's autograd and shape facts); the emulated ``torch_npu`` module, the dispatcher registration
(``kernels.dispatcher``) and the schema conformance test read it. ``load_all`` imports every module
of the package once so that the registry is complete without a hand-kept list.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple


@dataclass(frozen=True)
class OpSpec:
    """One emulated op and what the dispatcher needs to know about it.

    ``grads``: the inputs that get gradients; empty when the real op has no backward (no autograd
    node in ``torch_npu_autograd_nodes.txt``), in which case the kernel refuses grad inputs.
    ``grad_outputs``: the outputs whose gradients the real backward takes (e.g. only ``y`` of
    ``(y, rstd)``). ``fake``: output shapes/dtypes for FakeTensor/meta tracing, same signature as
    the op; None means the kernel itself runs on fake tensors (it has no data-dependent step).
    ``recompute``: ``(outputs, *args, **kwargs)`` -> the op's outputs, differentiable, for the
    backward; None means the kernel itself (an op whose result is a function of its inputs).
    """

    fn: Callable
    grads: Tuple[str, ...] = ()
    grad_outputs: Tuple[int, ...] = (0,)
    fake: Optional[Callable] = None
    recompute: Optional[Callable] = None

    @property
    def name(self) -> str:
        return self.fn.__name__


#: name -> kernel function (the real torch_npu name)
OPS: Dict[str, Callable] = {}
#: name -> the op's spec
SPECS: Dict[str, OpSpec] = {}


def npu_op(fn: Optional[Callable] = None, *, grads: Tuple[str, ...] = (), grad_outputs: Tuple[int, ...] = (0,),
           fake: Optional[Callable] = None, recompute: Optional[Callable] = None):
    """Register ``fn`` under its own name (which must be the real torch_npu name).

    ``@npu_op`` for an op without a backward; ``@npu_op(grads=(...), ...)`` otherwise (see OpSpec).
    """

    def register(fn: Callable) -> Callable:
        if fn.__name__ in OPS:
            raise RuntimeError(f"emulated op {fn.__name__} registered twice")
        OPS[fn.__name__] = fn
        SPECS[fn.__name__] = OpSpec(fn, tuple(grads), tuple(grad_outputs), fake, recompute)
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
