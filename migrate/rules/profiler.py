"""NPU210: a profiler of CUDA activity → torch_npu's profiler, which records the NPU's.

As ``transfer_to_npu`` does at run time (opmap/reference/torch_npu_facts.md §5), ``torch.profiler.profile(...)`` that
profiles the device (activities naming ``ProfilerActivity.CUDA``, or none: torch's default) becomes
``torch_npu.profiler.profile(...)``, its activities ``torch_npu.profiler.ProfilerActivity.CPU/NPU``,
its ``schedule(...)`` and ``tensorboard_trace_handler(...)`` torch_npu's, and a torch
``_ExperimentalConfig`` (CUPTI settings) is dropped (``experimental_config=None``), as the vendor's
tools drop it. A profiler of the CPU only stays as it is. Where torch_npu's profiler has no
counterpart (``_profiler_call``: the object is read with ``key_averages()``, a handler of the user's
own, activities computed at run time, ...) the call is kept and reported with the plan; so is a
``ProfilerActivity.CUDA`` outside a profile call, and ``ProfilerAction`` in a file that profiles the
device. CUDA sort keys of torch's result tables (``table(sort_by="cuda_time_total")``,
``evt.self_cuda_time_total``) become the device ones torch reads them as.
"""

from __future__ import annotations

import re
from typing import List, Set

import libcst as cst

from npu_migrate.migrate.diagnostics import DiagnosticCode
from npu_migrate.migrate.edits import ImportSpec, Replace
from npu_migrate.migrate.rules._literals import string_value
from npu_migrate.migrate.rules._profiler_call import PROFILE, ProfileCall, activity, qualified
from npu_migrate.migrate.rules._syntax import code, keyword_value
from npu_migrate.migrate.rules._table import dotted, plan_of
from npu_migrate.migrate.rules.base import Rule

KEPT, OUTSIDE = "pattern.profiler.kept", "pattern.profiler.outside_profile"
ACTION = frozenset({"torch.profiler.ProfilerAction", "torch.profiler.profiler.ProfilerAction"})
SORT_KEY = re.compile(r"(self_)?cuda_(time|time_total|memory_usage)")
IMPORT = ImportSpec("torch_npu.profiler")


class Profiler(Rule):
    declarations = (
        DiagnosticCode("NPU210", "profiler",
                       "torch.profiler of CUDA activity → torch_npu.profiler (kept and reported where torch_npu's "
                       "has no counterpart); CUDA sort keys → device",
                       rewrites=True, example="profiler"),
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
