"""Constraint checks shared by the emulated kernels.

Every check raises ``NpuOpError`` with the op name and the limit, the way a real NPU kernel
refuses an input, so that a migration mistake fails on the emulator as it would on hardware.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

import torch

#: True while a kernel runs as its own fake implementation (on FakeTensors: shapes, no values)
_SHAPES_ONLY = contextvars.ContextVar("npu_kernels_shapes_only", default=False)


class NpuOpError(RuntimeError):
    """An input that the real torch_npu op would reject."""


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float16`` -> ``float16``, for error messages."""
    return str(dtype).replace("torch.", "")


def require(cond: bool, op: str, message: str) -> None:
    if not cond:
        raise NpuOpError(f"{op}: {message}")


def check_dtypes(op: str, allowed, **tensors) -> None:
    """Each named tensor (None skipped) must have a dtype in ``allowed``; float64 never passes."""
    for name, t in tensors.items():
        if t is None:
            continue
        if t.dtype == torch.float64:
            raise NpuOpError(f"{op}: {name} is float64, and the NPU does not support float64")
        if t.dtype not in allowed:
            names = ", ".join(dtype_name(d) for d in allowed)
            raise NpuOpError(f"{op}: {name} has dtype {dtype_name(t.dtype)}; supported: {names}")


def check_same_dtype(op: str, **tensors) -> None:
    present = {n: t for n, t in tensors.items() if t is not None}
    dtypes = {t.dtype for t in present.values()}
    if len(dtypes) > 1:
        desc = ", ".join(f"{n}={dtype_name(t.dtype)}" for n, t in present.items())
        raise NpuOpError(f"{op}: inputs must share one dtype, got {desc}")


def refuse_autograd(op: str, *tensors) -> None:
    """Ops without a backward on a real NPU (torch_npu_autograd_nodes.txt) refuse grad inputs."""
    if torch.is_grad_enabled() and any(t is not None and isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
        raise NpuOpError(
            f"{op} has no backward on a real NPU (no autograd node in torch_npu 2.14.0); "
            "use it only on inference paths (under torch.no_grad()) or keep the original code for training"
        )


@contextlib.contextmanager
def shapes_only() -> Iterator[None]:
    """Run a kernel as its fake implementation: checks that read tensor values are skipped
    (``reads_values()`` is False) and the kernels that compute with data-dependent control flow
    return empty outputs of the right shapes."""
    token = _SHAPES_ONLY.set(True)
    try:
        yield
    finally:
        _SHAPES_ONLY.reset(token)


def reads_values() -> bool:
    """False inside ``shapes_only()``: skip checks on tensor values (they need real data)."""
    return not _SHAPES_ONLY.get()
