"""NPU209: torch APIs whose device is CUDA when none is named get the NPU named.

``transfer_to_npu`` turns the default (or "cuda") device of these calls into "npu" at run time;
statically the call names the NPU:

- ``torch.is_autocast_enabled()`` → ``torch.is_autocast_enabled("npu")`` (no device means CUDA's
  autocast state), ``torch.set_autocast_enabled(flag)`` → ``torch.set_autocast_enabled("npu", flag)``;
- ``torch.get_autocast_gpu_dtype()`` / ``torch.set_autocast_gpu_dtype(d)`` → ``torch.npu.get_autocast_dtype()``
  / ``torch.npu.set_autocast_dtype(d)`` (op-table renames, imports rebound like NPU201's);
- ``torch.amp.GradScaler()`` → ``torch.amp.GradScaler("npu")``: a CUDA scaler on a machine without CUDA
  disables itself, and float16 training loses its loss scaling;
- ``torch.random.fork_rng(...)`` → ``fork_rng(..., device_type="npu")``: else only the CPU generator
  is forked and restored.

A ``"cuda"`` passed as the device of these calls is NPU202's (a device string).
"""

from __future__ import annotations

from typing import Dict, Optional

import libcst as cst

from npu_migrate.migrate.diagnostics import DiagnosticCode
from npu_migrate.migrate.edits import Code
from npu_migrate.migrate.rules._syntax import code, keyword_value
from npu_migrate.migrate.rules._table import TORCH_NPU, TableNameRule

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
                       rewrites=True, example="cuda_default"),
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
