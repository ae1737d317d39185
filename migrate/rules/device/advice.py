"""NPU401/NPU402: the vendor tool's performance and precision advice, as opt-in notes.

Table-driven (``opmap/advice.yaml``): a use of a name with an NPU401/NPU402 record is noted with the
record's plan where the advice applies (``APPLIES``); two method forms are found by shape: a
host-to-device copy without ``non_blocking=True``, and ``.reshape(...)``. Each code's page is its
part below.

# NPU401
## What it does
Opt-in (`--select NPU4` or `--select NPU401`): notes where msFmkTransplt's performance advice
applies, with the advice as the plan. `torch.optim.AdamW`/`Adam`/`SGD`/`Adadelta`/`RMSprop` without
`fused=True` (torch_npu's `NpuFused*`, or `fused=True` where the NPU has the fused kernel);
`torch.nn.Linear` (a wrapper around `torch_npu.npu_linear`); `DataLoader` without `pin_memory=True`
and `num_workers > 0`; `DistributedDataParallel` without `bucket_cap_mb` (the vendor's value is
500); host-to-device copies (`.to(<device>)`, `.npu()`, `.cuda()`) without `non_blocking=True`;
`torch.autograd.detect_anomaly` and `set_detect_anomaly(<not False>)`;
`set_compile_mode(jit_compile=True)` and `pad_sequence` (dynamic shapes: `jit_compile=False`).

## Why
The vendor's tool writes this advice to `api_performance_advice.csv`
(opmap/reference/torch_npu_facts.md §(iii)); a user who moves from it to npu-migrate should not lose
it. It is opt-in because it is advice, not a migration: every DataLoader, copy and Linear of a
repository gets a note, and each suggestion has a cost to weigh (the vendor's own note on
`NpuFusedAdamW`: "performance has improved significantly, but the memory usage increases by 70%";
its traps: float32/float16 parameters only, `zero_grad(set_to_none=False)` by default,
`clip_grad_norm_fused_`).

## Fix safety
Notes only; nothing is rewritten. Each plan names the trade-off to measure before keeping the
change.

## Known problems
Shapes are not analysed: dynamic shapes are noted at `pad_sequence` and
`set_compile_mode(jit_compile=True)` only, not at every variable-length batch. A copy is recognised
by its device argument (a device string, `torch.device(...)`, a name saying "device"); `x.to(other)`
is not noted.

# NPU402
## What it does
Opt-in (`--select NPU4` or `--select NPU402`): notes the APIs of msFmkTransplt's precision advice —
`torch.baddbmm`, `torch.matmul`, `.reshape(...)` (overflow in its backward) and `torch.nn.Embedding`
(non-deterministic backward) — with a plan to check and, where needed, fix each.

## Why
The vendor's tool writes these to `api_precision_advice.csv` (opmap/reference/torch_npu_facts.md
§(iii)); a user who moves from it should keep the list. The notes are opt-in: matmuls and reshapes
are everywhere in model code, and most of them are fine; the plan says how to tell (`migrate parity`
with msprobe's criteria, cosine > 0.99 and max abs error < 1e-3; gradients with `--train`).

## Fix safety
Notes only; nothing is rewritten.

## Known problems
The notes repeat the vendor's list and do not know which call sites are at risk; `torch.bmm`, `@`
and `F.embedding` are not noted.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import libcst as cst

from ...diagnostics import DiagnosticCode
from .._literals import last_identifier, string_value
from ...view.syntax import int_value, keyword_value
from .._table import REPORTED, TableNameRule, dotted
from .device_string import DeviceString

NON_BLOCKING, RESHAPE = "pattern.advice.non_blocking", "pattern.advice.reshape"
OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adadelta", "RMSprop")


def _is_true(node: Optional[cst.CSTNode]) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def _is_false(node: Optional[cst.CSTNode]) -> bool:
    return isinstance(node, cst.Name) and node.value == "False"


def _loader(call: cst.Call) -> Optional[str]:
    workers = keyword_value(call, "num_workers")
    missing = [] if _is_true(keyword_value(call, "pin_memory")) else ["pin_memory=True"]
    if workers is None or int_value(workers) == 0:
        missing.append("num_workers > 0")
    return f" without {' and '.join(missing)}" if missing else None


def _first(call: cst.Call, keyword: str) -> Optional[cst.CSTNode]:
    found = keyword_value(call, keyword)
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    return found if found is not None else (positional[0] if positional else None)


# qualified name -> what in the call makes the advice apply ('' : always; None: not here)
APPLIES: Dict[str, Callable[[cst.Call], Optional[str]]] = {
    **{f"torch.optim.{name}": lambda c: None if _is_true(keyword_value(c, "fused")) else "" for name in OPTIMIZERS},
    "torch.utils.data.DataLoader": _loader,
    "torch.nn.parallel.DistributedDataParallel": lambda c: None if keyword_value(c, "bucket_cap_mb") else " without bucket_cap_mb",
    "torch.autograd.set_detect_anomaly": lambda c: None if _is_false(_first(c, "mode")) else " (mode not False)",
    "torch_npu.npu.set_compile_mode": lambda c: " with jit_compile=True" if _is_true(keyword_value(c, "jit_compile")) else None,
    "torch.npu.set_compile_mode": lambda c: " with jit_compile=True" if _is_true(keyword_value(c, "jit_compile")) else None,
}


class Advice(TableNameRule):
    declarations = (
        DiagnosticCode("NPU401", "performance-advice",
                       "the vendor tool's performance advice (fused optimizers, npu_linear, DataLoader, DDP buckets, "
                       "non_blocking, detect_anomaly, dynamic shapes); opt-in",
                       example="performance_advice", doc=__doc__),
        DiagnosticCode("NPU402", "precision-advice",
                       "the vendor tool's precision advice (baddbmm, matmul, reshape backward, Embedding backward); opt-in",
                       example="precision_advice", doc=__doc__),
    )
    triggers = (b"optim", b"Linear", b"DataLoader", b"DistributedDataParallel", b".to(", b".npu(", b".cuda(",
                b"anomaly", b"set_compile_mode", b"pad_sequence", b"baddbmm", b"matmul", b".reshape(", b"Embedding")

    def owns(self, record) -> bool:
        return record.code in self.codes and record.status in REPORTED

    def on_record(self, node, qualified, record, api) -> None:
        call = self.ctx.tree.parents().get(id(node))
        called = isinstance(call, cst.Call) and call.func is node
        condition = APPLIES.get(qualified)
        if condition is not None and not called:
            return  # the advice is about how it is called
        extra = condition(call) if condition is not None else ""
        if extra is not None:
            self.report(call if called else node, f"{qualified}{extra}: {record.summary}", fallback=record.fallback,
                        api=qualified, code=record.code)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or (dotted(func.value) and self.qualified_name(func.value)):
            return  # a module's function, not a tensor's method
        name = func.attr.value
        if name in ("to", "npu", "cuda") and self._copies_to_device(node) and not _is_true(keyword_value(node, "non_blocking")):
            self._pattern(node, NON_BLOCKING, f".{name}(...) without non_blocking=True")
        elif name == "reshape":
            self._pattern(node, RESHAPE, ".reshape(...)")

    def _copies_to_device(self, call: cst.Call) -> bool:
        if call.func.attr.value in ("npu", "cuda"):
            return True
        target = _first(call, "device")
        if target is None:
            return False
        value = string_value(target)
        if value is not None:
            return DeviceString.kin.fullmatch(value) is not None and value.split(":")[0] not in ("cpu", "meta")
        if isinstance(target, cst.Call):
            return dotted(target.func) is not None and self.qualified_name(target.func) == "torch.device"
        name = last_identifier(target)
        return bool(name) and DeviceString.hint.search(name.lower()) is not None

    def _pattern(self, node: cst.Call, api: str, what: str) -> None:
        record = self.ctx.table.exact(api)
        if record is not None and record.code in self.codes and record.fallback is not None:
            self.report(node, f"{what}: {record.summary}", fallback=record.fallback, api=api, code=record.code)
