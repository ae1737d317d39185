"""NPU207: a device test that guards CUDA-only code is kept as it is, and reported (``_cuda_only``
finds such tests; the device rules leave them alone).

## What it does
Finds device tests — `x.is_cuda`, `x.device.type == "cuda"` / `!= "cuda"`, `device_type != "cuda"`,
`str(d).startswith("cuda")`, `torch.cuda.is_available()` — in an `if`/`elif`, a conditional
expression, an `assert`, or the value of a flag (`use_triton = x.is_cuda and HAS_TRITON`,
`self.use_fp8 = ...`, a keyword argument or a `return` of a function named like one), where the code
the test decides about is CUDA-only: a name from a CUDA-only op-table record (Triton, Helion,
flash_attn, xformers, CUDA extensions, apex, bitsandbytes, mamba_ssm, CUDA graphs, float8, CuPy), a
Triton launch `kernel[grid](...)`, a call of a kernel defined in the file with a CUDA-only
decorator, or a name that says so (`triton`, `fp8`, `cuda_graph`, `flash_attn`, ...). The NPU202,
NPU204 and NPU201 rewrites leave such a test as it is, and this rule reports it.

## Why
On an NPU these tests are False. Rewritten to `x.is_npu` / `"npu"` / `torch.npu.is_available()` they
become True there, which sends the NPU into a Triton kernel or a CUDA extension (an import error or
a crash), or — for a `!= "cuda"` gate that turns float8 or CUDA graphs off elsewhere — turns them
on. Kept, the NPU takes the portable path, exactly as a CPU would.

## Fix safety
Nothing is rewritten. The NPU runs the other branch; if that branch is slow, port the kernel
(TileLang-Ascend / Ascend C) or call the matching `torch_npu` fused op under its own `x.is_npu`
test. `from torch.cuda import is_available as has_gpu` stays bound to `torch.cuda` when `has_gpu()`
guards CUDA-only code.

## Known problems
The evidence is local to the test and its branches: a flag computed in one function and read in
another is only kept if its name says what it gates. A test is kept also when only its non-CUDA side
names CUDA-only code (`if device.type != "cuda": use_fp8 = False`), which is the point, but it also
keeps the occasional test that merely mentions such a name.
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
                       example="cuda_only_branch", doc=__doc__),
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
