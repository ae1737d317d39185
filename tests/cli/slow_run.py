"""``python tests/cli/slow_run.py ARGS``: the real ``migrate`` command line, in a process of its own,
with one stand-in rule that makes a file slow to migrate, so that tests can kill or race a run at
a known moment (the process tests kill by pid only the processes they started).

The rule (NPU905) rewrites ``x.cuda()`` to ``x.npu()`` and sleeps ``$SLOW_SECONDS`` (default 600)
on a file that names ``SLOW_ME``, printing ``SLOW <pid>`` to stderr first so the test knows a
worker is busy. Workers are forked, so they see the stand-in.
"""

import os
import sys
import time

import libcst as cst

from npu_migrate.migrate import rules as migrate_rules
from npu_migrate.migrate.diagnostics import DiagnosticCode
from npu_migrate.migrate.edits import ImportSpec
from npu_migrate.migrate.rules.base import Rule


class SlowCudaToNpu(Rule):
    declarations = (DiagnosticCode("NPU905", "test-slow", "test rule: .cuda() becomes .npu(), slowly", rewrites=True),)
    triggers = (b".cuda(", b"SLOW_ME")

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == "SLOW_ME":
            print(f"SLOW {os.getpid()}", file=sys.stderr, flush=True)
            time.sleep(float(os.environ.get("SLOW_SECONDS", "600")))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
            self.replace(func.attr, cst.Name("npu"), "moved to the NPU", target="Tensor.npu", api="Tensor.cuda",
                         imports=[ImportSpec("torch_npu")])


if __name__ == "__main__":
    migrate_rules.all_rules = lambda: (SlowCudaToNpu,)
    from npu_migrate.migrate.cli import app

    sys.argv[0] = "migrate"
    app(prog_name="migrate")
