"""Small stand-in rules (codes NPU9xx, never used by real rules) so the CLI machinery is tested
independently of the real rule set, and helpers to build repos and invoke ``migrate run``."""

import hashlib
import subprocess
from pathlib import Path

import libcst as cst
import pytest
from typer.testing import CliRunner

from npu_migrate.migrate import rules as migrate_rules
from npu_migrate.migrate.cli import app
from npu_migrate.migrate.diagnostics import DiagnosticCode
from npu_migrate.migrate.edits import ImportSpec
from npu_migrate.migrate.rules.base import Rule
from npu_migrate.opmap import Fallback


class CudaToNpu(Rule):
    """``x.cuda()`` → ``x.npu()``; ``x.glue()`` additionally needs the helper module ``npu_glue``."""

    declarations = (DiagnosticCode("NPU901", "test-cuda", "test rule: .cuda() becomes .npu()", rewrites=True),)
    triggers = (b".cuda(", b".glue(")

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("cuda", "glue"):
            helpers = ("npu_glue",) if func.attr.value == "glue" else ()
            self.replace(func.attr, cst.Name("npu"), "moved to the NPU", target="Tensor.npu", api="Tensor.cuda",
                         imports=[ImportSpec("torch_npu")], helpers=helpers)


class NoDouble(Rule):
    declarations = (DiagnosticCode("NPU902", "test-double", "test rule: .double() is reported"),)
    triggers = (b".double(",)

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "double":
            self.report(node, "NPUs have no float64", api="Tensor.double",
                        fallback=Fallback("cpu", "keep this computation on the CPU or use float32"))


class Crashes(Rule):
    declarations = (DiagnosticCode("NPU903", "test-crash", "test rule: crashes on CRASH_ME"),)
    triggers = (b"CRASH_ME",)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == "CRASH_ME":
            raise ValueError("boom")


TEST_RULES = (CudaToNpu, NoDouble, Crashes)


@pytest.fixture
def fake_rules(monkeypatch):
    """Replace the rule set with the test rules (workers are forked, so they see it too); ``x.glue()``
    calls no helper function, so the helper it needs is core alone."""
    monkeypatch.setattr(migrate_rules, "all_rules", lambda: TEST_RULES)
    return TEST_RULES


def write_tree(root: Path, files: dict) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


def snapshot(root: Path) -> dict:
    """Every file under root (except .git) with its hash: to prove a directory was not written."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".git" not in p.relative_to(root).parts}


def git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(root), *args],
                          capture_output=True, text=True, check=True)


def git_init(root: Path, commit: bool = True) -> None:
    git(root, "init", "-q")
    if commit:
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "init")


def invoke(*args):
    """``migrate run ARGS``; in-process (``--jobs 1``) unless the test chooses ``--jobs``."""
    args = [*map(str, args)] + ([] if "--jobs" in args else ["--jobs", "1"])
    return CliRunner().invoke(app, ["run", *args], catch_exceptions=False)


DEMO_REPO = Path(__file__).resolve().parents[2] / "fixtures" / "demo"


def migrate_demo(base: Path, *args) -> tuple:
    """Copy the bundled demo repo to ``base/demo`` and ``migrate run`` it with the real rules into
    ``base/demo-npu`` and ``base/reports``; returns (repo, out, reports, CLI result)."""
    import shutil

    repo, out, reports = base / "demo", base / "demo-npu", base / "reports"
    shutil.copytree(DEMO_REPO, repo, ignore=shutil.ignore_patterns("__pycache__"))
    result = invoke(repo, "--out", out, "--report-dir", reports, *args)
    assert result.exit_code == 0, result.output
    return repo, out, reports, result
