"""Running a migrated snippet against its original on the emulated NPU (shared by the fused rules'
tests; the snippet is migrated by ``tests.snippets``): execute both sources, build twins with the
same weights, count the fused kernels a call makes, and read the op table's tolerances."""

from __future__ import annotations

import sys
from contextlib import contextmanager

import torch

from npu_migrate import kernels
from tests.full_helper import HELPERS
from tests.tolerances import recorded



@contextmanager
def emulated_npu():
    """The emulated NPU with the vendored helper importable as ``npu_glue`` (fresh per use)."""
    import torch._dynamo  # noqa: F401 - imported before the emulator patches torch (tests/helpers/migrated_models.py)

    sys.path.insert(0, str(HELPERS))
    sys.modules.pop("npu_glue", None)
    try:
        with kernels.emulate():
            yield sys.modules["torch_npu"]
    finally:
        sys.modules.pop("npu_glue", None)
        sys.path.remove(str(HELPERS))


def load(source: str, **extra) -> dict:
    """``source`` executed as a top-level module named ``snippet``."""
    namespace = {"__name__": "snippet", **extra}
    exec(compile(source, "<snippet>", "exec"), namespace)
    return namespace


@contextmanager
def counting(module, *ops):
    """``{op: number of calls}`` of ``module.<op>`` made inside the block."""
    calls = dict.fromkeys(ops, 0)
    originals = {op: getattr(module, op) for op in ops}

    def counted(op):
        def call(*args, **kwargs):
            calls[op] += 1
            return originals[op](*args, **kwargs)
        return call

    for op in ops:
        setattr(module, op, counted(op))
    try:
        yield calls
    finally:
        for op, original in originals.items():
            setattr(module, op, original)


def tolerance(op: str, dtype: torch.dtype) -> dict:
    """The op table's tolerance of ``torch_npu.<op>`` (the kernel a fused rule calls) in ``dtype``."""
    return recorded(f"torch_npu.{op}", dtype)


def twins(original_ns: dict, migrated_ns: dict, name: str, *args, dtype=None, **kwargs):
    """The class ``name`` built from both sources with the same weights."""
    torch.manual_seed(0)
    before = original_ns[name](*args, **kwargs)
    after = migrated_ns[name](*args, **kwargs)
    after.load_state_dict(before.state_dict())
    if dtype is not None:
        before, after = before.to(dtype), after.to(dtype)
    return before, after
