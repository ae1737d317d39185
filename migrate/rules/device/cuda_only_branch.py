"""NPU207: a device test that guards CUDA-only code is kept as it is, and reported.

``if x.is_cuda: <Triton kernel>`` rewritten to ``if x.is_npu:`` would send the NPU into the kernel;
``if device_type != "cuda": use_fp8 = False`` rewritten to ``!= "npu"`` would turn float8 on. The
device rules (NPU201 ``torch.cuda.is_available``, NPU202 ``"cuda"`` strings, NPU204 ``.is_cuda``)
leave such tests alone (``_cuda_only`` finds them), so they stay False on an NPU and the NPU takes
the other path; this rule reports each, naming the CUDA-only code it guards.
"""

from __future__ import annotations

import libcst as cst

from ...diagnostics import DiagnosticCode
from ._cuda_only import cuda_only_guards
from ...view.syntax import code
from .._table import plan_of
from ..base import Rule

RECORD = "pattern.device.cuda_only_guard"


class CudaOnlyBranch(Rule):
    declarations = (
        DiagnosticCode("NPU207", "cuda-only-branch",
                       "device test guarding CUDA-only code kept (False on an NPU: the NPU takes the other path)",
                       example="cuda_only_branch"),
    )
    triggers = (b"is_cuda", b"cuda")

    def visit_Module(self, node: cst.Module) -> None:
        guards = cuda_only_guards(self.ctx)
        if not guards:
            return
        fallback = plan_of(self.ctx.table, RECORD, self.summary)
        for guard in guards:
            test = " ".join(code(guard.test).split())
            self.report(guard.atoms[0], f"{test} guards CUDA-only code ({guard.evidence}): kept as it is, so an NPU "
                        f"(not a CUDA device) takes the non-CUDA path", fallback=fallback, api=RECORD)
