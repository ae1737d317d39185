"""NPU120: ``torch.optim.<X>(..., fused=True)`` whose fused aten op (``FUSED_OPS``) has no NPU kernel:
the step runs on the CPU.

## What it does
Reports `torch.optim.<Optimizer>(..., fused=True)` (any value but a literal False/None) when the
optimizer's fused step, one aten op, has no NPU kernel: of `torch.optim.Adam` (`_fused_adam_`),
`AdamW` (`_fused_adamw_`), `SGD` (`_fused_sgd_`) and `Adagrad` (`_fused_adagrad_`), torch_npu 2.14.0
lacks `_fused_adagrad_`. Which ops have NPU kernels is read from
`opmap/reference/aten_ops_with_npu_kernels.txt`, so a torch_npu release that adds the kernel
silences the report by updating that list. The report carries the plan of the `pattern.optim.fused`
record; the other optimizers are left alone.

## Why
torch accepts `fused=True` on the NPU (the PrivateUse1 backend is among its fused-capable devices),
so nothing fails: an aten op without an NPU kernel falls back to the CPU, and the optimizer step
then copies every parameter, gradient and state to the host and back, every step.
opmap/reference/torch_npu_facts.md §(v).9 says `torch.optim.*(fused=True)` falls back to the CPU;
the kernel list extracted from the same 2.14.0 wheel registers `_fused_adam_`, `_fused_adamw_` and
`_fused_sgd_` for the NPU, so Adam, AdamW and SGD with `fused=True` are not reported (their NPU401
note names `fused=True` as the fused path without `NpuFusedAdamW`'s traps).

## Fix safety
Reported only. Dropping `fused=True` selects torch's default foreach implementation, which runs on
the NPU (torch_npu enables foreach on Ascend 910B and newer) and computes the same update.

## Known problems
`fused=` passed through `**kwargs` or an optimizer class chosen at run time (`getattr(torch.optim,
name)`) is not seen.
"""

from __future__ import annotations

from functools import lru_cache
from typing import FrozenSet

import libcst as cst

from ...diagnostics import DiagnosticCode
from ...view.syntax import keyword_value
from .._table import dotted, plan_of
from ..base import Rule
from ....opmap.reference import ATEN_OPS_WITH_NPU_KERNELS, lines

RECORD = "pattern.optim.fused"
FUSED_OPS = {"torch.optim.Adam": "_fused_adam_", "torch.optim.AdamW": "_fused_adamw_",
             "torch.optim.SGD": "_fused_sgd_", "torch.optim.Adagrad": "_fused_adagrad_"}


@lru_cache(maxsize=1)
def npu_kernels() -> FrozenSet[str]:
    """Names of the aten ops with an NPU kernel (overloads and schemas stripped)."""
    return frozenset(line.split("(")[0].split(".")[0] for line in lines(ATEN_OPS_WITH_NPU_KERNELS))


class FusedOptimizer(Rule):
    declarations = (
        DiagnosticCode("NPU120", "fused-optimizer-cpu",
                       "optimizer fused=True whose aten::_fused_* op has no NPU kernel (the step falls back to the CPU)",
                       example="fused_optimizer", doc=__doc__),
    )
    triggers = (b"fused",)

    def visit_Call(self, node: cst.Call) -> None:
        fused = keyword_value(node, "fused")
        if fused is None or (isinstance(fused, cst.Name) and fused.value in ("False", "None")):
            return
        qualified = self.qualified_name(node.func) if dotted(node.func) else None
        op = FUSED_OPS.get(qualified or "")
        if op is None or op in npu_kernels():
            return
        why = f"{qualified}(fused=True): aten::{op} has no NPU kernel, so every step runs on the CPU"
        self.report(node, why, fallback=plan_of(self.ctx.table, RECORD, why), api=qualified)
