"""NPU209: torch APIs whose device is CUDA when none is named get the NPU named.

## What it does
Names the NPU in torch calls whose device is CUDA when none is named: `torch.is_autocast_enabled()`
becomes `torch.is_autocast_enabled("npu")`, `torch.set_autocast_enabled(flag)` becomes
`torch.set_autocast_enabled("npu", flag)`, `torch.amp.GradScaler(...)` without a device becomes
`torch.amp.GradScaler("npu", ...)`, `torch.random.fork_rng(...)` without `device_type` gets
`device_type="npu"`, and the deprecated CUDA spellings `torch.get_autocast_gpu_dtype()` /
`torch.set_autocast_gpu_dtype(d)` become `torch.npu.get_autocast_dtype()` /
`torch.npu.set_autocast_dtype(d)` (imports rebound under the user's local names, as NPU201 does). A
`"cuda"` passed as their device is rewritten by NPU202.

## Why
`transfer_to_npu` redirects exactly these at run time (opmap/reference/torch_npu_facts.md §5:
`is_autocast_enabled`/`set_autocast_enabled` default or `cuda` → `npu`, `get/set_autocast_gpu_dtype`
→ `torch_npu.npu.get/set_autocast_dtype`). Left alone on an NPU, the autocast queries read and set
CUDA's autocast state, not the NPU's; `torch.amp.GradScaler()` builds a CUDA scaler, which disables
itself on a machine without CUDA, so float16 training silently loses its loss scaling (gradients
underflow); `fork_rng()` forks and restores only the CPU generator, so the NPU's random state leaks
out of the block.

## Fix safety
Safe: each rewrite passes the device that `transfer_to_npu` would pass at run time; the arguments
are kept as written (edits inside them are applied). A call that already names a device
(positionally or by keyword) or passes `*args`/`**kwargs` is left alone.

## Known problems
A device chosen at run time (`GradScaler(device)` with a variable holding "cuda") is NPU202's only
where the variable is assigned a literal device string. `torch.cuda.amp.GradScaler` and
`torch.cuda.amp.autocast` are NPU201's.
"""

from __future__ import annotations

from typing import Dict, Optional

import libcst as cst

from ...diagnostics import DiagnosticCode
from ...edits import Code
from ...view.syntax import keyword_value
from .._table import TORCH_NPU, TableNameRule

NPU = '"npu"'
# the API -> (its device parameter, how many positional arguments the call has when it names none)
DEVICE_PARAMETER: Dict[str, tuple] = {
    "torch.is_autocast_enabled": ("device_type", 0),
    "torch.set_autocast_enabled": ("device_type", 1),
    "torch.amp.GradScaler": ("device", 0),
    "torch.amp.grad_scaler.GradScaler": ("device", 0),
    "torch.random.fork_rng": ("device_type", None),  # keyword-only in effect: any number of positionals
}


def with_device(call: cst.Call, keyword: str, positional: bool) -> Code:
    """``call`` naming the NPU: first positional (``f("npu", ...)``) or ``keyword="npu"`` last; every
    original argument is a hole, so edits inside the arguments are kept."""
    holes, parts = {"f": call.func}, []
    for index, arg in enumerate(call.args):
        holes[f"a{index}"] = arg.value
        star = arg.star if isinstance(arg.star, str) else ""
        name = f"{arg.keyword.value}=" if arg.keyword is not None else ""
        parts.append(f"{star}{name}{{a{index}}}")
    parts = [NPU, *parts] if positional else [*parts, f"{keyword}={NPU}"]
    return Code(f"{{f}}({', '.join(parts)})", tuple(holes.items()))


class CudaDefault(TableNameRule):
    declarations = (
        DiagnosticCode("NPU209", "cuda-default",
                       'torch API whose device defaults to CUDA (autocast state, GradScaler, fork_rng) → names "npu"',
                       rewrites=True, example="cuda_default", doc=__doc__),
    )
    triggers = (b"autocast_enabled", b"autocast_gpu_dtype", b"GradScaler", b"fork_rng")

    def on_record(self, node, qualified, record, api) -> None:
        if record.status == "rename":
            super().on_record(node, qualified, record, api)
            return
        call = self.ctx.tree.parents().get(id(node))
        if record.status != "native" or not isinstance(call, cst.Call) or call.func is not node:
            return
        new = self._named(call, qualified)
        if new is not None:
            self.replace(call, new, f"{qualified}(...) uses CUDA when no device is named → names \"npu\"",
                         target=f'{qualified}({NPU})', api=qualified, imports=[TORCH_NPU])

    def _named(self, call: cst.Call, qualified: str) -> Optional[Code]:
        """The call naming the NPU, or None when it names a device already (or cannot be read)."""
        parameter, bare = DEVICE_PARAMETER.get(qualified, (None, None))
        if parameter is None or keyword_value(call, parameter) is not None or any(a.star for a in call.args):
            return None
        positional = sum(1 for a in call.args if a.keyword is None)
        if bare is None:
            return with_device(call, parameter, positional=False)
        return with_device(call, parameter, positional=True) if positional == bare else None
