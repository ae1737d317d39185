"""NPU203: ``x.cuda(...)`` → ``x.npu(...)`` (tensors and modules); outside torch code (``_scope``)
reported, not rewritten.

## What it does
Rewrites `x.cuda(...)` to `x.npu(...)`, arguments kept, for any receiver that may be a tensor or
module (also `torch.Tensor.cuda(x)` and `torch.nn.Module.cuda(m)`). Adds `import torch_npu`.

## Why
`Tensor.npu()` and `Module.npu()` exist once torch_npu is imported; `transfer_to_npu` aliases `cuda`
to them.

## Fix safety
Safe for tensors and modules. Not rewritten: calls on imported modules (`mylib.cuda()`), and
`self.cuda()` inside a class that defines its own `cuda`.

Only files that use torch are rewritten: a file that imports torch (or a library built on it), or
imports from its own package, is; a file that imports another GPU array library (CuPy, Numba, JAX,
...) and not torch is left alone; any other file gets the site reported ("... not made: this file
imports neither torch nor its own package"), never rewritten.

## Known problems
A user class with its own `cuda()` method called from another file (`batch.cuda()`) is rewritten
too, since the receiver's type is unknown statically; rename the method or review the diff.
"""

import libcst as cst

from ...diagnostics import DiagnosticCode
from .._members import MemberRule
from .._scope import TorchScoped
from .._table import TORCH_NPU


class CudaMethod(TorchScoped, MemberRule):
    declarations = (
        DiagnosticCode("NPU203", "cuda-method",
                       ".cuda() → .npu() on tensors and modules",
                       rewrites=True, example="cuda_method", doc=__doc__),
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
