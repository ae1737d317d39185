"""NPU201: ``torch.cuda.*`` → ``torch.npu.*``, as ``transfer_to_npu`` swaps the module at run time.

Attribute chains are rewritten (``torch.cuda.amp.autocast`` → ``torch.npu.amp.autocast``, once, as a
whole); imports are rebound keeping the user's local names (``from torch import cuda`` →
``from torch_npu import npu as cuda``). Names without a public twin are reported.

Two uses are left to other rules, because renaming them would send an NPU down a CUDA-only path:
``torch.cuda.get_device_properties(...).major`` (NPU206: an NPU has no CUDA capability) and a
``torch.cuda.is_available()`` that guards CUDA-only code (NPU207: it stays False on an NPU).
"""

from npu_migrate.migrate.diagnostics import DiagnosticCode
from npu_migrate.migrate.rules._cuda_only import CudaOnlyGuards
from npu_migrate.migrate.rules._table import TableNameRule
from npu_migrate.migrate.rules.capability import is_properties_field


class CudaApi(CudaOnlyGuards, TableNameRule):
    declarations = (
        DiagnosticCode("NPU201", "cuda-api",
                       "torch.cuda API → torch.npu (reported when torch_npu has no twin)",
                       rewrites=True, example="cuda_api"),
    )
    triggers = (b"cuda", b"_host_emptyCache")

    def on_record(self, node, qualified, record, api) -> None:
        if is_properties_field(self.ctx, node) or self.keeps_cuda(node):
            return
        super().on_record(node, qualified, record, api)

    def _owned_rename(self, qualified):
        """``from torch.cuda import is_available as has_gpu`` stays when ``has_gpu()`` guards CUDA-only
        code: rebinding the name would make that guard True on an NPU."""
        if any(qualified in self.ctx.names.imports.get(name, ()) for name in self.kept_names()):
            return None
        return super()._owned_rename(qualified)
