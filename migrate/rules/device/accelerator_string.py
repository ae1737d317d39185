"""NPU208: Lightning accelerator strings (``accelerator="cuda"`` / ``"gpu"``) are reported, not rewritten.

## What it does
Reports the strings `"cuda"` and `"gpu"` where they name a Lightning accelerator: the `accelerator=`
argument of any call (`Trainer`, `Fabric`), values assigned to names like `accelerator`, parameter
defaults and `--accelerator` command-line defaults. Comparisons (`accelerator == "cuda"`) and sets
of allowed names only test the choice and are not reported. The NPU202 device-string rewrite leaves
all of them alone.

## Why
Lightning accepts "cpu", "gpu", "cuda", "mps", "tpu", "hpu", "auto" and registered or custom
`Accelerator` instances; "npu" is not a built-in name, "cuda" fails on a machine without CUDA, and
"auto" on an NPU machine silently trains on the CPU. Lightning's documented extension point is a
custom `Accelerator` subclass. Hugging Face Accelerate needs no change: it detects an Ascend NPU
itself (accelerate ≥ 0.22).

## Fix safety
Reported only (plan `manual`); the plan lists the methods of the NPU accelerator (set_device,
get_parallel_devices, auto_device_count, is_available, get_device_stats) in terms of `torch.npu`.

## Known problems
Accelerator names read from YAML configs or environment variables are not seen.
"""

import re

import libcst as cst

from ...diagnostics import DiagnosticCode
from .._literals import LiteralRule, literal_sites, string_value
from ...view.syntax import code
from .._table import plan_of

RECORD = "pattern.device.lightning_accelerator"


class AcceleratorString(LiteralRule):
    declarations = (
        DiagnosticCode("NPU208", "accelerator-string",
                       'Lightning accelerator "cuda"/"gpu" (no built-in NPU accelerator: reported)',
                       example="accelerator_string", doc=__doc__),
    )
    triggers = (b"accelerator",)

    pattern = re.compile(r"cuda|gpu")
    kin = re.compile(r"cpu|cuda|gpu|mps|tpu|hpu|xpu|npu|auto")
    words = {}
    keywords = frozenset({"accelerator"})
    first_arg_of = frozenset()
    hint = re.compile(r"accelerator")

    def visit_IfExp(self, node: cst.IfExp) -> None:
        """Only ternaries in accelerator positions (found through the positions above)."""

    def visit_Comparison(self, node: cst.Comparison) -> None:
        """Comparisons test an accelerator choice; only the places that make it are reported."""

    def fix(self, expr) -> None:
        if expr is None or not (string_value(expr) is not None or isinstance(expr, cst.IfExp)):
            return  # sets of allowed names, choices=[...]: not a choice
        record = self.ctx.table.exact(RECORD)
        why = record.summary if record is not None and record.summary else self.summary
        for site in literal_sites(expr, self.pattern):
            if id(site) not in self._seen:
                self._seen.add(id(site))
                self.report(site, f"Lightning accelerator {code(site)}: {why}", fallback=plan_of(self.ctx.table, RECORD, why),
                            api=RECORD)
