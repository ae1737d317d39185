"""NPU208: Lightning accelerator strings (``accelerator="cuda"`` / ``"gpu"``) are reported, not rewritten.

Lightning accepts "cpu", "gpu", "cuda", "mps", "tpu", "hpu" and "auto" (and registered or custom
``Accelerator`` instances); "npu" is not built in, and "auto" on an NPU machine picks the CPU. So
neither keeping "cuda" (Lightning refuses it: no CUDA device) nor writing "npu" (unknown name) is
right: the site is reported with the plan of writing a small NPU ``Accelerator``. The strings are
found where a choice is made: the ``accelerator=`` keyword, assignments to names like
``accelerator``, parameter defaults and ``--accelerator`` defaults (a string or a ternary of
strings); comparisons and sets of allowed names only test a choice and are not reported.
Hugging Face Accelerate needs nothing: it detects an Ascend NPU itself (accelerate >= 0.22).
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
                       example="accelerator_string"),
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
