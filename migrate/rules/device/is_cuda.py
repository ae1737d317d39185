"""NPU204: ``x.is_cuda`` → ``x.is_npu``, except where the test guards CUDA-only code (NPU207).

## What it does
Rewrites reads of `x.is_cuda` to `x.is_npu` (also `torch.Tensor.is_cuda`). Adds `import torch_npu`.

## Why
`Tensor.is_npu` exists once torch_npu is imported; on an NPU `is_cuda` is always False, which
silently changes code paths.

## Fix safety
Safe for tensors. Assignments (`cfg.is_cuda = ...`) and `self.is_cuda` in classes that set it
themselves are left alone. A test that guards CUDA-only code (`if x.is_cuda: <Triton kernel>`) is
kept and reported as NPU207: `x.is_npu` would send the NPU into the kernel.

Only files that use torch are rewritten: a file that imports torch (or a library built on it), or
imports from its own package, is; a file that imports another GPU array library (CuPy, Numba, JAX,
...) and not torch is left alone; any other file gets the site reported ("... not made: this file
imports neither torch nor its own package"), never rewritten.

## Known problems
A user object with an `is_cuda` attribute set in another file is rewritten too.
"""

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
                       rewrites=True, example="is_cuda", doc=__doc__),
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
