"""NPU201: ``torch.cuda.*`` → ``torch.npu.*``, as ``transfer_to_npu`` swaps the module at run time.

## What it does
Rewrites `torch.cuda.X` to `torch.npu.X` for every name of `torch.cuda` that has a public twin in
torch_npu (device, streams/events, memory, RNG, graphs, `torch.cuda.amp.*`, `CUDAGraph` →
`NPUGraph`), handling each dotted chain once as a whole. Imports are rebound keeping the local
names: `from torch import cuda` → `from torch_npu import npu as cuda`, `from torch.cuda import
synchronize as sync` → `from torch_npu.npu import synchronize as sync`, `import torch.cuda as tc` →
`import torch_npu.npu as tc`. Names without a twin are reported. Also `torch._C._host_emptyCache()`
→ `torch.npu.host_empty_cache()` (transfer_to_npu redirects it to torch_npu's host cache), and the
CUDA-availability queries of libraries that `transfer_to_npu` wraps so that they answer False
(`transformers.utils.is_torch_cuda_available`, `accelerate.utils.is_cuda_available`) are reported:
code that chooses its device with them never picks the NPU. Adds `import torch_npu`.

Two uses are left to other rules, because renaming them would send an NPU down a CUDA-only path:
`torch.cuda.get_device_properties(...).major` (NPU206: an NPU has no CUDA capability) and a
`torch.cuda.is_available()` that guards CUDA-only code (NPU207: it stays False on an NPU).

## Why
`torch.npu` is `torch_npu.npu` once torch_npu is imported; `transfer_to_npu` swaps the module at run
time, this makes the same change visible in the source.

## Fix safety
Safe: each target is in torch_npu's public `torch.npu` API. `torch.npu.get_device_capability()`
returns None unless `TORCH_NPU_DEVICE_CAPABILITY` is set, so code comparing capabilities needs
review.

## Known problems
Import statements name `torch_npu.npu` (the real module) because `torch.npu` exists only as an
attribute; renamed names keep their local alias (`NPUGraph as CUDAGraph`).
"""

from ...diagnostics import DiagnosticCode
from ._cuda_only import CudaOnlyGuards
from .._table import TableNameRule
from .capability import is_properties_field


class CudaApi(CudaOnlyGuards, TableNameRule):
    declarations = (
        DiagnosticCode("NPU201", "cuda-api",
                       "torch.cuda API → torch.npu (reported when torch_npu has no twin)",
                       rewrites=True, example="cuda_api", doc=__doc__),
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
