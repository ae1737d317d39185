"""Start-up: ``migrate --help`` and ``migrate explain CODE`` import neither libcst nor torch (the
figures are measured with ``time``, not here), ``migrate explain`` lists each code with its own
summary, and ``migrate demo`` prints no NumPy warning whether NumPy is installed or not."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from npu_migrate.migrate.cli.app import app
from npu_migrate.migrate.diagnostics import doc_page

HEAVY = ("libcst", "torch", "numpy", "yaml", "npu_migrate.migrate.engine", "npu_migrate.migrate.rules")
PROBE = """
import runpy, sys
sys.argv = ["migrate", *sys.argv[1:]]
try:
    runpy.run_module("npu_migrate.migrate", run_name="__main__")
except SystemExit:
    pass
print("LOADED", sorted(m for m in {heavy!r} if m in sys.modules))
"""


def _loaded(tmp_path: Path, *args: str) -> list:
    done = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    line = next(line for line in done.stdout.splitlines() if line.startswith("LOADED"))
    return eval(line[len("LOADED "):])


@pytest.mark.parametrize("args, allowed", [
    (["--help"], set()),
    (["run", "--help"], set()),
    (["explain", "NPU302"], set()),
])
def test_help_and_explain_import_only_what_they_need(tmp_path, args, allowed):
    assert set(_loaded(tmp_path, *args)) <= allowed


def test_explain_lists_each_code_with_its_own_summary():
    result = CliRunner().invoke(app, ["explain"])
    lines = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in result.stdout.splitlines() if line}
    # NPU321 is the RMSNorm rule's report code: its summary is its own page's, not the NPU320 rewrite's
    assert lines["NPU321"] == doc_page("NPU321").splitlines()[0].split(": ", 1)[1]
    assert lines["NPU321"] != lines["NPU320"] and lines["NPU331"] != lines["NPU330"] and lines["NPU341"] != lines["NPU340"]


def test_explain_refuses_what_is_not_a_code():
    result = CliRunner().invoke(app, ["explain", "../../README"])
    assert result.exit_code == 2 and "unknown diagnostic code" in result.stderr


NO_NUMPY = """
import sys

sys.modules["numpy"] = None  # as if NumPy were not installed: import fails, importlib.util.find_spec says None
"""


@pytest.mark.parametrize("numpy", ["absent", "installed"])
def test_demo_prints_no_numpy_warning(tmp_path, numpy):
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    if numpy == "absent":  # every process of the run (the CLI and its parity workers) lacks NumPy
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(NO_NUMPY)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "npu_migrate.migrate", "demo", "--workdir", str(tmp_path / "w")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "3/3 case(s) passed" in done.stdout
    assert "NumPy" not in done.stderr and "Warning" not in done.stderr, done.stderr[-3000:]
    if numpy == "absent":  # the probe really hid NumPy
        probe = subprocess.run([sys.executable, "-c", "import numpy"], env=env, capture_output=True, text=True)
        assert probe.returncode != 0


def test_a_warm_run_imports_neither_libcst_nor_torch_nor_the_rules(tmp_path):
    """Issue 23 item 2: every result cached, the run reads them and writes its outputs without the
    engine, libcst, the rules or the op table's loading (the code catalogue is the cache's copy)."""
    source = tmp_path / "repo" / "model.py"
    source.parent.mkdir()
    source.write_text("import torch\n\ndef f(x):\n    return x.cuda()\n")
    args = ["run", str(source), "--out", str(tmp_path / "out"), "--report-dir", str(tmp_path / "r"),
            "--cache-dir", str(tmp_path / "cache"), "--isolated"]
    assert "npu_migrate.migrate.engine" in _loaded(tmp_path, *args)  # cold: migrated
    assert set(_loaded(tmp_path, *args)) <= {"yaml"}  # warm (yaml: the op table's package, not its files)
    assert "x.npu()" in (tmp_path / "out" / "model.py").read_text()
    assert "NPU203" in (tmp_path / "r" / "report.md").read_text()
