"""Registry of the emulated torch_npu ops.

Each kernel module decorates its public functions with ``@npu_op`` (or ``@npu_op(...)`` with the
op's fake implementation, autograd formula and view rule); the emulated ``torch_npu`` module, the
dispatcher registration (``kernels.dispatcher``) and the schema conformance test read it.
``load_all`` imports every module of the package once so that the registry is complete without a
hand-kept list.

How an op reads its tensor arguments (views included) is declared here once, for every op, eager
and fake alike: as torch_npu's op layer does, a kernel computes on its inputs' values, so a view
(transposed, permuted, sliced with a step, expanded, at a storage offset, any ``as_strided``) gives
exactly the result of its ``.contiguous()`` copy, and the outputs are fresh contiguous tensors (or
the inputs themselves, for the in-place ``npu_apply_rotary_pos_emb``). The kernels therefore
receive contiguous tensors and never depend on strides. The exceptions are documented ones: the
arguments that an op's documentation requires to be contiguous
(``opmap/reference/torch_npu_contiguous_inputs.txt``) are refused when they are not, and an op's
``views`` rule may refuse other layouts its documentation rejects (``npu_grouped_matmul``'s
transposed ``x``).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

import torch

from ._checks import NpuOpError
from ..opmap import reference


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
    the real op has no backward; the kernel then refuses grad inputs. ``contiguous``: the tensor
    arguments the real op requires to be contiguous. ``fn`` and ``fake`` are the registered
    functions, which read their arguments as the module doc says."""

    fn: Callable
    fake: Optional[Callable] = None
    derivative: Optional[Derivative] = None
    contiguous: Tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.fn.__name__


#: name -> kernel function (the real torch_npu name)
OPS: Dict[str, Callable] = {}
#: name -> the op's spec
SPECS: Dict[str, OpSpec] = {}


def npu_op(fn: Optional[Callable] = None, *, fake: Optional[Callable] = None,
           derivative: Optional[Derivative] = None, views: Optional[Callable] = None):
    """Register ``fn`` under its own name (which must be the real torch_npu name):
    ``@npu_op`` or ``@npu_op(fake=..., derivative=..., views=...)``. ``views`` (same signature as
    the op) raises for argument layouts the op's documentation rejects beyond contiguity; it sees
    the arguments as the caller passed them. Returns the registered kernel (see the module doc)."""

    def register(fn: Callable) -> Callable:
        name = fn.__name__
        if name in OPS:
            raise RuntimeError(f"emulated op {name} registered twice")
        contiguous = reference.contiguous_inputs().get(name, ())
        kernel = reading_views(fn, contiguous, views)
        OPS[name] = kernel
        SPECS[name] = OpSpec(kernel, None if fake is None else reading_views(fake, contiguous, views), derivative,
                             contiguous)
        return kernel

    return register(fn) if fn is not None else register


#: argument types that hold no tensor (checked first: ``isinstance(x, torch.Tensor)`` is slow for them)
_PLAIN = frozenset((type(None), bool, int, float, str))


def _contiguous(value: Any) -> Any:
    """A tensor (or each tensor of a list/tuple) as a contiguous tensor: itself when it already is."""
    if type(value) in _PLAIN:
        return value
    if isinstance(value, torch.Tensor):
        return value if value.is_contiguous() else value.contiguous()
    if isinstance(value, (list, tuple)):
        return type(value)([_contiguous(v) for v in value])
    return value


def reading_views(fn: Callable, contiguous: Tuple[str, ...] = (), views: Optional[Callable] = None) -> Callable:
    """``fn`` reading its tensor arguments as torch_npu's op layer does (module doc): the ``contiguous``
    arguments refused unless contiguous, ``views`` run on the arguments as given, every other tensor
    argument replaced by its contiguous copy; tensor outputs returned contiguous."""
    op = fn.__name__
    names = list(inspect.signature(fn).parameters)
    unknown = set(contiguous) - set(names)
    if unknown:
        raise RuntimeError(f"{op}: the contiguity reference names arguments it does not take: {sorted(unknown)}")
    positions = {name: names.index(name) for name in contiguous}

    def refuse_strided(name: str, value: Any) -> None:
        if isinstance(value, torch.Tensor) and not value.is_contiguous():
            raise NpuOpError(
                f"{op}: {name} must be contiguous (torch_npu's documentation: the kernel takes no non-contiguous "
                f"{name}); got shape {tuple(value.shape)} with strides {value.stride()}, call .contiguous() first")

    @functools.wraps(fn)
    def kernel(*args, **kwargs):
        for name, index in positions.items():
            refuse_strided(name, args[index] if index < len(args) else kwargs.get(name))
        if views is not None:
            views(*args, **kwargs)
        # an output that is an input (the in-place op's) is one of the contiguous inputs: kept as it is
        return _contiguous(fn(*[_contiguous(a) for a in args], **{k: _contiguous(v) for k, v in kwargs.items()}))

    return kernel


_loaded = False


def load_all() -> Dict[str, Callable]:
    global _loaded
    if not _loaded:
        from .. import kernels

        for info in pkgutil.iter_modules(kernels.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"npu_migrate.kernels.{info.name}")
        _loaded = True
    return OPS


def specs() -> Dict[str, OpSpec]:
    load_all()
    return SPECS
