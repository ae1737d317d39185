"""NPU203: ``x.cuda(...)`` → ``x.npu(...)`` (tensors and modules), arguments kept; outside torch code
(``_scope``) reported, not rewritten."""

import libcst as cst

from ...diagnostics import DiagnosticCode
from .._members import MemberRule
from .._scope import TorchScoped
from .._table import TORCH_NPU


class CudaMethod(TorchScoped, MemberRule):
    declarations = (
        DiagnosticCode("NPU203", "cuda-method",
                       ".cuda() → .npu() on tensors and modules",
                       rewrites=True, example="cuda_method"),
    )
    triggers = (b".cuda",)
    member = "cuda"

    def visit_Call(self, node: cst.Call) -> None:
        attr = self.called_member(node)
        record = self.ctx.table.get("Tensor.cuda")
        if attr is None or record is None or record.status != "rename":
            return
        new = record.target.rpartition(".")[2]
        self.scoped_replace(attr.attr, cst.Name(new), f".{self.member}() → .{new}()", target=record.target,
                            api=record.api, imports=[TORCH_NPU])
