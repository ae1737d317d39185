"""NPU120: ``torch.optim.<X>(..., fused=True)`` whose fused aten op has no NPU kernel: the step runs
on the CPU.

torch accepts ``fused=True`` on the NPU (its PrivateUse1 backend is among the fused-capable
devices), and each optimizer's fused step is one aten op (``FUSED_OPS``). Whether the NPU has a
kernel for it is read from the reference list of aten ops with NPU kernels
(``opmap/reference/aten_ops_with_npu_kernels.txt``, torch_npu 2.14.0): ``_fused_adam_``,
``_fused_adamw_`` and ``_fused_sgd_`` have one, ``_fused_adagrad_`` has not. An optimizer whose op
is missing is reported with the plan of ``pattern.optim.fused`` (drop ``fused=True``: foreach runs
on the NPU); the others are left alone.
"""

from __future__ import annotations

from functools import lru_cache
from typing import FrozenSet

import libcst as cst

from npu_migrate.migrate.diagnostics import DiagnosticCode
from npu_migrate.migrate.rules._syntax import keyword_value
from npu_migrate.migrate.rules._table import dotted, plan_of
from npu_migrate.migrate.rules.base import Rule
from npu_migrate.opmap.reference import ATEN_OPS_WITH_NPU_KERNELS, lines

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
                       example="fused_optimizer"),
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
