"""NPU204: ``x.is_cuda`` → ``x.is_npu``, except where the test guards CUDA-only code (NPU207 keeps
it: on an NPU it stays False) and outside torch code (``_scope``: reported, not rewritten)."""

import libcst as cst

from ...diagnostics import DiagnosticCode
from ._cuda_only import CudaOnlyGuards
from .._members import MemberRule
from .._scope import TorchScoped
from .._table import TORCH_NPU


class IsCuda(CudaOnlyGuards, TorchScoped, MemberRule):
    declarations = (
        DiagnosticCode("NPU204", "is-cuda",
                       ".is_cuda → .is_npu on tensors",
                       rewrites=True, example="is_cuda"),
    )
    triggers = (b"is_cuda",)
    member = "is_cuda"

    def visit_Attribute(self, node: cst.Attribute) -> None:
        record = self.ctx.table.get("Tensor.is_cuda")
        if not self.is_torch_member(node) or record is None or record.status != "rename" or self.keeps_cuda(node):
            return
        new = record.target.rpartition(".")[2]
        self.scoped_replace(node.attr, cst.Name(new), f".{self.member} → .{new}", target=record.target,
                            api=record.api, imports=[TORCH_NPU])
