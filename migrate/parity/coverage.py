"""Op coverage of the migrated run: a dispatch-level trace of the aten ops that have no NPU kernel
(they would fall back to the CPU on a real NPU), of any float64 use (no float64 on an NPU), and of
the fused NPU kernels that ran.

An aten op counts as a fallback when it is not in ``aten_ops_with_npu_kernels.txt`` (from
the torch-npu 2.14.0 wheel) and has no backend-independent kernel: a CompositeExplicitAutograd
kernel (views, for example, run on any device), or the CompositeExplicitAutogradNonFunctional
kernel of a structured op whose ``.out`` overload has an NPU kernel (it calls that).

The trace judges the ops that really dispatch on a device. Composite ops
(CompositeImplicitAutograd: ``aten::linear``, ``reshape``, ``to``, ``einsum``, ``rms_norm``) are
decomposed by autograd before the trace sees them when grad mode is on or off, but reach it whole
under ``torch.inference_mode``; there the trace decomposes them itself, so every mode is judged
on the same ops. A composite op that the NPU implements as a whole is run whole and counted
covered; the backend-specific ops a decomposition picks are counted as covered too
(``COVERED_BY_COMPOSITE``). Ops that a non-composite kernel calls underneath are not seen.

Fused NPU kernels are counted once per call in ``fused_npu_ops``, by their torch_npu name: calls
of the emulated ``torch_npu`` functions (``wrap_fused``) and ops of the ``npu`` dispatcher
namespace (``torch.ops.npu.*``, as torch_npu registers them); what they are emulated with is not
traced. Higher-order operators (``flex_attention``, control flow) pass through: they are counted
in ``higher_order_ops`` and the aten ops of their eager implementation are traced when it can be
run under the trace, else they run untraced. ``torch.compile`` does not compile under a dispatch
trace: compiled regions of the migrated model run eagerly here, op by op.
"""

from __future__ import annotations

import functools
from collections import Counter
from contextlib import contextmanager
from typing import Callable, Dict, FrozenSet, Optional, Tuple

import torch
from torch._C import DispatchKey
from torch._ops import HigherOrderOperator
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ...opmap import reference

_DOUBLE = (torch.float64, torch.complex128)
NPU_NAMESPACE = "npu"  # torch.ops.npu.*: the dispatcher ops of torch_npu (and of the emulator)

# name prefix of ops the backing device picks inside a composite op -> that op, which has an NPU
# kernel (F.scaled_dot_product_attention becomes _scaled_dot_product_flash_attention_for_cpu here)
COVERED_BY_COMPOSITE = {"_scaled_dot_product_": "scaled_dot_product_attention"}


@functools.lru_cache(maxsize=None)
def npu_kernel_ops() -> FrozenSet[str]:
    """``name.overload`` (and bare ``name`` for the default overload) of ops with NPU kernels."""
    return frozenset(line.split("(", 1)[0].strip() for line in reference.lines(reference.ATEN_OPS_WITH_NPU_KERNELS))


def _has_kernel(op: torch._ops.OpOverload, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key)


@functools.lru_cache(maxsize=None)
def has_npu_kernel(op: torch._ops.OpOverload) -> bool:
    """True for an aten op in the NPU kernel list (or picked inside one that is)."""
    name, overload = op._schema.name.split("::", 1)[1], op._overloadname
    known = npu_kernel_ops()
    if f"{name}.{overload}" in known or (overload == "default" and name in known):
        return True
    return any(name.startswith(prefix) and whole in known for prefix, whole in COVERED_BY_COMPOSITE.items())


@functools.lru_cache(maxsize=None)
def falls_back(op: torch._ops.OpOverload) -> bool:
    namespace, name = op._schema.name.split("::", 1)
    if namespace != "aten" or has_npu_kernel(op):
        return False
    if _has_kernel(op, "CompositeExplicitAutograd"):
        return False
    return not (_has_kernel(op, "CompositeExplicitAutogradNonFunctional") and f"{name}.out" in npu_kernel_ops())


@functools.lru_cache(maxsize=None)
def decomposes(op: torch._ops.OpOverload) -> bool:
    """A composite aten op without an NPU kernel of its own: the device runs its decomposition."""
    return op.namespace == "aten" and not has_npu_kernel(op) and _has_kernel(op, "CompositeImplicitAutograd")


def _op_name(op: torch._ops.OpOverload) -> str:
    return f"{op._schema.name}.{op._overloadname}"


class OpTrace(TorchDispatchMode):
    """Counts aten ops without NPU kernels, float64 use, fused NPU kernels and higher-order ops;
    remembers the innermost op that raised (``raised``: ``(op name, exception)``)."""

    supports_higher_order_operators = True  # they reach __torch_dispatch__ and pass through

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """torch.compile compiles under the trace (the default would make it fall back to eager,
        which breaks eager FlexAttention: it compiles its higher-order op with fullgraph=True);
        the trace then sees what the compiled code dispatches."""
        return True

    def __init__(self) -> None:
        super().__init__()
        self.fallback: Counter = Counter()
        self.float64: Counter = Counter()
        self.fused: Counter = Counter()
        self.higher_order: Counter = Counter()
        self.raised: Optional[Tuple[str, BaseException]] = None
        self._inside_fused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, HigherOrderOperator):
            return self._higher_order(func, args, kwargs)
        if func.namespace == NPU_NAMESPACE:
            return self._fused_call(func._opname, func, *args, **kwargs)
        try:
            if decomposes(func) and not self._inside_fused:  # only reaches here in inference mode
                with self:
                    result = func.decompose(*args, **kwargs)
                if result is not NotImplemented:
                    return result
            result = func(*args, **kwargs)
        except Exception as exc:
            if not self._inside_fused:
                self._note_raise(_op_name(func), exc)
            raise
        if not self._inside_fused:
            if falls_back(func):
                self.fallback[_op_name(func)] += 1
            tensors = [t for t in tree_flatten((args, kwargs, result))[0] if isinstance(t, torch.Tensor)]
            if any(t.dtype in _DOUBLE for t in tensors):
                self.float64[_op_name(func)] += 1
        return result

    def _higher_order(self, func: HigherOrderOperator, args, kwargs):
        """Run a higher-order op's eager implementation with its aten ops traced, where it has one."""
        if self._inside_fused:
            return func(*args, **kwargs)
        self.higher_order[func.name()] += 1
        dense = func.py_kernels.get(DispatchKey.CompositeExplicitAutograd)
        try:
            if dense is None:
                return func(*args, **kwargs)
            with self:
                return dense(*args, **kwargs)
        except Exception as exc:
            self._note_raise(func.name(), exc)
            raise

    def _fused_call(self, name: str, fn: Callable, *args, **kwargs):
        """One fused NPU kernel call: counted once (not again for what it calls), its raise noted."""
        outermost = not self._inside_fused
        if outermost:
            self.fused[name] += 1
        self._inside_fused += 1
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if outermost:
                self._note_raise(name, exc)
            raise
        finally:
            self._inside_fused -= 1

    def _note_raise(self, name: str, exc: BaseException) -> None:
        """Keep the innermost op that raised: an outer op re-raising the same error (or one
        raised from it) does not replace it."""
        if self.raised is None or not _in_chain(self.raised[1], exc):
            self.raised = (name, exc)

    def wrap_fused(self, name: str, fn: Callable) -> Callable:
        """``fn`` (an emulated torch_npu function) counted as one NPU kernel, its insides untraced."""

        @functools.wraps(fn)
        def fused(*args, **kwargs):
            return self._fused_call(name, fn, *args, **kwargs)

        return fused

    def reset(self) -> None:
        for counts in (self.fallback, self.float64, self.fused, self.higher_order):
            counts.clear()
        self.raised = None

    @contextmanager
    def recording(self):
        """Trace the block with fresh counts."""
        self.reset()
        with self:
            yield self

    def to_json(self) -> Dict[str, Dict[str, int]]:
        return {
            "fallback_ops": dict(self.fallback.most_common()),
            "float64_ops": dict(self.float64.most_common()),
            "fused_npu_ops": dict(self.fused.most_common()),
            "higher_order_ops": dict(self.higher_order.most_common()),
        }


def exception_chain(exc: Optional[BaseException]):
    """``exc`` and the exceptions it was raised from or while handling."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _in_chain(inner: BaseException, outer: BaseException) -> bool:
    return any(e is inner for e in exception_chain(outer))
