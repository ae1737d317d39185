"""NPU208: Lightning accelerator strings (``accelerator="cuda"`` / ``"gpu"``) are reported, not rewritten.

Lightning accepts "cpu", "gpu", "cuda", "mps", "tpu", "hpu" and "auto" (and registered or custom
``Accelerator`` instances); "npu" is not built in, and "auto" on an NPU machine picks the CPU. So
neither keeping "cuda" (Lightning refuses it: no CUDA device) nor writing "npu" (unknown name) is
right: the site is reported with the plan of writing a small NPU ``Accelerator``. The strings are
found where ``_literals`` finds device strings: the ``accelerator=`` keyword, names like
``accelerator``, parameter defaults, ``--accelerator`` options and ternaries of such strings.
Hugging Face Accelerate needs nothing: it detects an Ascend NPU itself (accelerate >= 0.22).
"""

import re

import libcst as cst

from npu_migrate.migrate.rules._literals import LiteralRule, literal_sites
from npu_migrate.opmap import Fallback

RECORD = "pattern.device.lightning_accelerator"


class AcceleratorString(LiteralRule):
    code = "NPU208"
    name = "accelerator-string"
    summary = 'Lightning accelerator "cuda"/"gpu" (no built-in NPU accelerator: reported)'
    triggers = (b"accelerator",)

    pattern = re.compile(r"cuda|gpu")
    kin = re.compile(r"cpu|cuda|gpu|mps|tpu|hpu|xpu|npu|auto")
    words = {}
    keywords = frozenset({"accelerator"})
    first_arg_of = frozenset()
    hint = re.compile(r"accelerator")

    def visit_IfExp(self, node: cst.IfExp) -> None:
        """Only ternaries in accelerator positions (found through the positions above)."""

    def fix(self, expr) -> None:
        if expr is None:
            return
        record = self.ctx.table.exact(RECORD)
        fallback = record.fallback if record is not None and record.fallback else Fallback("manual", self.summary)
        for site in literal_sites(expr, self.pattern):
            if id(site) not in self._seen:
                self._seen.add(id(site))
                self.report(site, f"Lightning accelerator {cst.Module([]).code_for_node(site)}: {record.summary if record else self.summary}",
                            fallback=fallback, api=RECORD)
