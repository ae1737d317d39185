"""Op coverage of the migrated run: a dispatch-level trace of the aten ops that have no NPU kernel
(they would fall back to the CPU on a real NPU) and of any float64 use (no float64 on an NPU).

An aten op counts as a fallback when it is not in ``aten_ops_with_npu_kernels.txt`` (from
the torch-npu 2.14.0 wheel) and has no backend-independent kernel: a CompositeExplicitAutograd
kernel (views, for example, run on any device), or the CompositeExplicitAutogradNonFunctional
kernel of a structured op whose ``.out`` overload has an NPU kernel (it calls that). Ops that a
composite kernel calls underneath are not seen by the trace. Composite ops that the NPU
implements as a whole are decomposed for the backing device before the trace sees them; the
backend-specific ops that decomposition picks are counted as covered (``COVERED_BY_COMPOSITE``). Calls into the emulated ``torch_npu`` fused ops are
counted as one NPU kernel each; the aten ops they are emulated with are not traced.
"""

from __future__ import annotations

import functools
from collections import Counter
from contextlib import contextmanager
from typing import Callable, Dict, FrozenSet

import torch

from npu_migrate.opmap import reference
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_DOUBLE = (torch.float64, torch.complex128)

# name prefix of ops the backing device picks inside a composite op -> that op, which has an NPU
# kernel (F.scaled_dot_product_attention becomes _scaled_dot_product_flash_attention_for_cpu here)
COVERED_BY_COMPOSITE = {"_scaled_dot_product_": "scaled_dot_product_attention"}


@functools.lru_cache(maxsize=None)
def npu_kernel_ops() -> FrozenSet[str]:
    """``name.overload`` (and bare ``name`` for the default overload) of ops with NPU kernels."""
    return frozenset(line.split("(", 1)[0].strip() for line in reference.lines(reference.ATEN_OPS_WITH_NPU_KERNELS))


@functools.lru_cache(maxsize=None)
def falls_back(op: torch._ops.OpOverload) -> bool:
    namespace, name = op._schema.name.split("::", 1)
    if namespace != "aten":
        return False
    overload = op._overloadname
    known = npu_kernel_ops()
    if f"{name}.{overload}" in known or (overload == "default" and name in known):
        return False
    if any(name.startswith(prefix) and op_name in known for prefix, op_name in COVERED_BY_COMPOSITE.items()):
        return False
    has_kernel = functools.partial(torch._C._dispatch_has_kernel_for_dispatch_key, op.name())
    if has_kernel("CompositeExplicitAutograd"):
        return False
    return not (has_kernel("CompositeExplicitAutogradNonFunctional") and f"{name}.out" in known)


def _op_name(op: torch._ops.OpOverload) -> str:
    return f"{op._schema.name}.{op._overloadname}"


class OpTrace(TorchDispatchMode):
    """Counts aten ops without NPU kernels, float64 use, and emulated fused-op calls."""

    def __init__(self) -> None:
        super().__init__()
        self.fallback: Counter = Counter()
        self.float64: Counter = Counter()
        self.fused: Counter = Counter()
        self._inside_fused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if not self._inside_fused:
            if falls_back(func):
                self.fallback[_op_name(func)] += 1
            tensors = [t for t in tree_flatten((args, kwargs, result))[0] if isinstance(t, torch.Tensor)]
            if any(t.dtype in _DOUBLE for t in tensors):
                self.float64[_op_name(func)] += 1
        return result

    def wrap_fused(self, name: str, fn: Callable) -> Callable:
        """``fn`` (an emulated torch_npu op) counted as one NPU kernel, its insides untraced."""

        @functools.wraps(fn)
        def fused(*args, **kwargs):
            self.fused[name] += 1
            self._inside_fused += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._inside_fused -= 1

        return fused

    @contextmanager
    def recording(self):
        """Trace the block with fresh counts."""
        self.fallback.clear()
        self.float64.clear()
        self.fused.clear()
        with self:
            yield self

    def to_json(self) -> Dict[str, Dict[str, int]]:
        return {
            "fallback_ops": dict(self.fallback.most_common()),
            "float64_ops": dict(self.float64.most_common()),
            "fused_npu_ops": dict(self.fused.most_common()),
        }
