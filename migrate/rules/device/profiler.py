"""NPU210: a profiler of CUDA activity → torch_npu's profiler, which records the NPU's; where
torch_npu's profiler has no counterpart (``_profiler_call``) the call is kept and reported.

## What it does
Moves a profiler of CUDA activity to torch_npu's profiler, which records the NPU's:
`torch.profiler.profile(...)` whose activities name `ProfilerActivity.CUDA` (or that names none:
torch's default) becomes `torch_npu.profiler.profile(...)`; its activities become
`torch_npu.profiler.ProfilerActivity.CPU`/`.NPU`, `activities=torch.profiler.supported_activities()`
becomes torch_npu's, `schedule(...)` and `tensorboard_trace_handler(...)` become torch_npu's (also
through a name assigned once and used only there), an `export_stacks(..., "self_cuda_time_total")`
on the object becomes `"self_npu_time_total"`, and a torch `_ExperimentalConfig(...)` becomes
`experimental_config=None`. A profiler of the CPU only (`activities=[ProfilerActivity.CPU]`) stays
as it is.

The call is kept and reported, with the plan, where torch_npu's profiler has no counterpart: the
object is read with `key_averages()`, `events()` or another method torch_npu's lacks, or leaves the
expression (returned, passed on); `on_trace_ready` is a handler of the user's own; the schedule is
not a `torch.profiler.schedule(...)`; the activities are computed at run time; or an argument
torch_npu's `profile` does not take (`acc_events=`, `execution_trace_observer=`). A
`ProfilerActivity.CUDA` outside a call this rule migrates, and a `ProfilerAction` in a file that
profiles the device, are reported too.

Sort keys that name CUDA columns of torch's result tables — `table(sort_by="cuda_time_total")`,
`"self_cuda_time_total"`, `"cuda_memory_usage"`, and the attributes `evt.cuda_time_total`,
`evt.self_cuda_time_total` — become the device ones (`"device_time_total"`,
`.self_device_time_total`).

## Why
On an NPU torch's profiler records host operators only: the unmigrated profiler shows no device
activity at all. `transfer_to_npu` swaps `torch.profiler.profile`, `schedule`,
`tensorboard_trace_handler`, `ProfilerAction`, `ProfilerActivity.CUDA`/`CPU` for torch_npu's and
deletes a non-NPU `experimental_config` (opmap/reference/torch_npu_facts.md §5; msFmkTransplt
rewrites `ProfilerActivity.CUDA` → `NPU` and removes `experimental_config`, §(iii)). The config is
dropped rather than reported because its settings configure CUPTI (metrics, per-kernel measurement)
and mean nothing on an NPU; the message says it was dropped and the op table's `_ExperimentalConfig`
record has torch_npu's equivalent.

torch_npu's profiler is not a drop-in, which the runtime swap ignores: its `profile` is keyword-only
with fewer arguments, takes only its own activity/action/config types, and its object has start,
stop, step, export_chrome_trace, export_stacks, export_memory_timeline and add_metadata(_json) but
no `key_averages()`/`events()` — results are files in the trace directory (operator_details.csv,
kernel_details.csv, trace_view.json) read with MindStudio Insight (torch_npu/profiler/profiler.py of
the 2.x wheels). Swapping a profiler whose results are read with `key_averages()` turns a working
script into an AttributeError; such a call is reported instead.

torch maps `cuda` in a sort key to `device` itself (`profiler_util._build_table`), so
`"device_time_total"` sorts by the same column and names no CUDA; the vendor's blanket `cuda` →
`npu` string rewrite would produce `"npu_time_total"`, which torch's table does not know.

## Fix safety
Rewritten calls keep every argument and their formatting; the migrated example runs on the emulated
NPU (`kernels/profiler.py`, the real API over torch's CPU profiler) and trains exactly as the
original (tests/rules/test_profiler.py). The sort-key rewrite is exact. Reports leave the code
unchanged.

## Known problems
A profiler object stored as `self.<attr>` is checked against every `.<attr>.<method>` read in the
file; readers in other files are not seen. Activities built in a list that is mutated
(`activities.append(ProfilerActivity.CUDA)`) are reported, not migrated.
`torch.autograd.profiler.profile(use_device="cuda")` (the legacy profiler) is not handled.
"""

from __future__ import annotations

import re
from typing import List, Set

import libcst as cst

from ...diagnostics import DiagnosticCode
from ...edits import ImportSpec, Replace
from .._literals import string_value
from ._profiler_call import PROFILE, ProfileCall, activity, qualified
from ...view.syntax import code, keyword_value
from .._table import dotted, plan_of
from ..base import Rule

KEPT, OUTSIDE = "pattern.profiler.kept", "pattern.profiler.outside_profile"
ACTION = frozenset({"torch.profiler.ProfilerAction", "torch.profiler.profiler.ProfilerAction"})
SORT_KEY = re.compile(r"(self_)?cuda_(time|time_total|memory_usage)")
IMPORT = ImportSpec("torch_npu.profiler")


class Profiler(Rule):
    declarations = (
        DiagnosticCode("NPU210", "profiler",
                       "torch.profiler of CUDA activity → torch_npu.profiler (kept and reported where torch_npu's "
                       "has no counterpart); CUDA sort keys → device",
                       rewrites=True, example="profiler", doc=__doc__),
    )
    triggers = (b"profile", b"ProfilerActivity", b"cuda_time", b"cuda_memory_usage")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._accounted: Set[int] = set()  # activity nodes a profile call migrated, reported or kept
        self._device = False  # the file profiles the device
        self._later: List[cst.Attribute] = []  # ProfilerActivity.CUDA / ProfilerAction.X, judged at the end

    def visit_Call(self, node: cst.Call) -> None:
        if qualified(self.qualified_name, node.func) in PROFILE:
            self._profile(node)
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value == "table":
            key = keyword_value(node, "sort_by")
            if isinstance(key, cst.SimpleString) and SORT_KEY.fullmatch(string_value(key) or ""):
                new = key.with_changes(value=key.value.replace("cuda", "device"))
                self.replace(key, new, f"sort_by {code(key)} → {code(new)} (torch reads cuda_* keys as its device "
                             "columns)", target=string_value(new), api="torch.autograd.profiler_util.EventList.table")

    def _profile(self, call: cst.Call) -> None:
        migration = ProfileCall(self.ctx, call).migration()
        self._accounted.update(id(n) for n in migration.parts)
        if migration.cpu_only:
            return
        self._device = True
        if migration.why:
            self.report(call, f"torch.profiler.profile kept: {migration.why}",
                        fallback=plan_of(self.ctx.table, KEPT, migration.why), api="torch.profiler.profile")
            return
        edits = [Replace(node, cst.parse_expression(text)) for node, text in migration.edits]
        dropped = f"; {migration.dropped}" if migration.dropped else ""
        self.rewrite(call, f"torch.profiler.profile → torch_npu.profiler.profile (records NPU activity){dropped}",
                     target="torch_npu.profiler.profile", edits=edits, api="torch.profiler.profile", imports=[IMPORT])

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if activity(self.qualified_name, node) == "CUDA" or qualified(self.qualified_name, node.value) in ACTION:
            self._later.append(node)
        elif SORT_KEY.fullmatch(node.attr.value) and (dotted(node) is None or self.qualified_name(node.value) is None):
            if isinstance(self.ctx.tree.parents().get(id(node)), cst.AssignTarget):
                return
            new = node.attr.value.replace("cuda", "device")
            self.replace(node.attr, cst.Name(new), f".{node.attr.value} → .{new} (torch's device column; the cuda_* "
                         "name is its deprecated alias)", target=new, api=f"FunctionEvent.{node.attr.value}")

    def leave_Module(self, original_node: cst.Module) -> None:
        for node in self._later:
            if id(node) in self._accounted:
                continue
            is_action = qualified(self.qualified_name, node.value) in ACTION
            if is_action and not self._device:
                continue
            what = code(node).strip()
            why = (f"{what}: torch_npu's profile runs a schedule whose actions are torch_npu.profiler.ProfilerAction"
                   if is_action else f"{what} outside a profile call this tool migrates: the NPU's activity is "
                   "torch_npu.profiler.ProfilerActivity.NPU, for torch_npu's profile only")
            self.report(node, why, fallback=plan_of(self.ctx.table, OUTSIDE, why), api=what)
