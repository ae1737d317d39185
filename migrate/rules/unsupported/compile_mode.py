"""NPU114: CUDA graphs requested through torch.compile, and inductor's Triton settings, reported.

## What it does
Reports `torch.compile(...)` calls (also as decorators) that ask for CUDA graphs:
`mode="reduce-overhead"`, `mode="max-autotune"` (both capture cudagraph trees on CUDA) or
`options={"triton.cudagraphs": True}`, with the plan of the `torch.compile` record; and every use of
a `torch._inductor.config.triton.*` setting, with its record's plan. `torch.compile` itself is kept
(its record is `native`).

## Why
CUDA graphs are a CUDA driver feature and inductor's Triton settings only act where inductor
generates Triton kernels; torch_npu's own graph capture is `torch.npu.NPUGraph`, `torch.npu.graph`
and `torch.npu.make_graphed_callables` (public `torch.npu` API; the NPU201 rename maps
`torch.cuda.graph`/`CUDAGraph`/`make_graphed_callables` to them), and transfer_to_npu makes
`has_triton()` answer False (opmap/reference/torch_npu_facts.md §5).

## Fix safety
Reported only (plan `manual`).

## Known problems
A mode passed through a variable (`torch.compile(m, mode=args.mode)`) is not seen; options
dictionaries built elsewhere are not read.
"""

from __future__ import annotations

import libcst as cst

from ...diagnostics import DiagnosticCode
from .._literals import string_value
from ...view.syntax import keyword_value
from .._table import REPORTED, TableNameRule, dotted

CUDA_GRAPH_MODES = frozenset({"reduce-overhead", "max-autotune"})
CUDA_GRAPH_OPTIONS = frozenset({"triton.cudagraphs", "triton.cudagraph_trees"})


class CompileMode(TableNameRule):
    declarations = (
        DiagnosticCode("NPU114", "compile-mode",
                       "torch.compile CUDA-graph modes and inductor Triton settings (CUDA-only)",
                       example="compile_mode", doc=__doc__),
    )
    triggers = (b"reduce-overhead", b"max-autotune", b"cudagraph", b"_inductor")

    def owns(self, record) -> bool:
        return record.code == self.code and record.status in REPORTED

    def visit_Call(self, node: cst.Call) -> None:
        if dotted(node.func) is None or self.qualified_name(node.func) != "torch.compile":
            return
        record = self.ctx.table.get("torch.compile")
        if record is None or record.fallback is None:
            return
        asked = self._cuda_graphs(node)
        if asked:
            self.report(node, f"torch.compile({asked}): {record.summary}", fallback=record.fallback,
                        api="torch.compile")

    @staticmethod
    def _cuda_graphs(call: cst.Call) -> str:
        """What in the call asks for CUDA graphs, as source text ('' when nothing does)."""
        mode = keyword_value(call, "mode")
        if mode is not None and string_value(mode) in CUDA_GRAPH_MODES:
            return f"mode={string_value(mode)!r}"
        options = keyword_value(call, "options")
        if isinstance(options, cst.Dict):
            for element in options.elements:
                if isinstance(element, cst.DictElement) and string_value(element.key) in CUDA_GRAPH_OPTIONS:
                    if not (isinstance(element.value, cst.Name) and element.value.value == "False"):
                        return f"options[{string_value(element.key)!r}]"
        return ""
