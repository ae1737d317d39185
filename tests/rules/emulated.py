"""Running a migrated snippet against its original on the emulated NPU (shared by the SwiGLU and
MoE gating rule tests): migrate with one rule's codes, execute both sources, build twins with the
same weights, count the fused kernels a call makes, and read the op table's tolerances."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import torch

from npu_migrate import kernels
from npu_migrate.migrate.engine import build_engine
from npu_migrate.opmap import load_table

HELPERS = Path(__file__).resolve().parents[2] / "migrate" / "helpers"
TABLE = load_table()


def migrate(source: str, *codes: str, spelling: str = "as written") -> str:
    """``source`` migrated with only ``codes`` selected; every finding is one of them. ``spelling``
    "low precedence": every operand text the rules paste is ``x if True else x`` (``pasted_low``)."""
    with pasted_low(spelling == "low precedence"):
        result = build_engine(TABLE, select=list(codes)).migrate("snippet.py", source.encode())
    assert result.status == "changed", (result.status, result.error, result.findings)
    assert all(f.code in codes for f in result.findings), result.findings
    if spelling == "low precedence":
        assert " if True else " in result.migrated, "no operand text was pasted"
    return result.migrated


#: how the executed rewrites of the fused rules are spelled: operand text as the rule writes it, or
#: every pasted operand ``x if True else x`` (the same value, the lowest precedence a pure operand
#: has), which must land whole in every template and compute the same
SPELLINGS = ("as written", "low precedence")


@contextmanager
def pasted_low(active: bool = True):
    """While active, every text pasted into a template (what ``migrate.parens.atom`` receives, in
    each module that imports it) is ``text if True else text``."""
    from npu_migrate.migrate import parens

    real = parens.atom
    users = [m for name, m in list(sys.modules.items())
             if active and name.startswith("npu_migrate.") and getattr(m, "atom", None) is real]
    for module in users:
        module.atom = lambda text: real(f"{real(text)} if True else {real(text)}")
    try:
        yield
    finally:
        for module in users:
            module.atom = real


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
    record = TABLE.get(f"torch_npu.{op}").tolerance[str(dtype).replace("torch.", "")]
    return dict(rtol=record.rtol, atol=record.atol)


def twins(original_ns: dict, migrated_ns: dict, name: str, *args, dtype=None, **kwargs):
    """The class ``name`` built from both sources with the same weights."""
    torch.manual_seed(0)
    before = original_ns[name](*args, **kwargs)
    after = migrated_ns[name](*args, **kwargs)
    after.load_state_dict(before.state_dict())
    if dtype is not None:
        before, after = before.to(dtype), after.to(dtype)
    return before, after
