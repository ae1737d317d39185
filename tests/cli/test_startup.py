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

pytestmark = pytest.mark.slow

HEAVY = ("libcst", "torch", "numpy", "yaml", "pathspec", "packaging", "npu_migrate.migrate.engine",
         "npu_migrate.migrate.rules", "npu_migrate.migrate.files.kinds")
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
    engine, libcst, the rules, the op table (nor PyYAML), the dependency-file kinds or pathspec (the
    code catalogue is the cache's copy)."""
    source = tmp_path / "repo" / "model.py"
    source.parent.mkdir()
    source.write_text("import torch\n\ndef f(x):\n    return x.cuda()\n")
    args = ["run", str(source), "--out", str(tmp_path / "out"), "--report-dir", str(tmp_path / "r"),
            "--cache-dir", str(tmp_path / "cache"), "--isolated"]
    assert "npu_migrate.migrate.engine" in _loaded(tmp_path, *args)  # cold: migrated
    assert _loaded(tmp_path, *args) == []  # warm
    assert "x.npu()" in (tmp_path / "out" / "model.py").read_text()
    assert "NPU203" in (tmp_path / "r" / "report.md").read_text()


def _run(tmp_path: Path, *extra: str) -> None:
    done = subprocess.run([sys.executable, "-m", "npu_migrate.migrate", "run", str(tmp_path / "repo"), "--out",
                           str(tmp_path / "out"), "--report-dir", str(tmp_path / "r"), "--isolated", "-q", *extra],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def _reports(tmp_path: Path) -> dict:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted((tmp_path / "r").iterdir()) if p.is_file()}


def test_a_warm_run_of_an_unchanged_tree_leaves_its_reports_as_they_are(tmp_path):
    """Issue 23 item 2: reports made from the same inputs are not made again, unless one of them is
    no longer on disk as it was written; a change in the tree, or a run without the cache, makes them."""
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "model.py").write_text("import torch\n\ndef f(x):\n    return x.cuda()\n")
    cache = ("--cache-dir", str(tmp_path / "cache"))
    _run(tmp_path, *cache)
    first = _reports(tmp_path)
    assert set(first) == {"changes.patch", "report.json", "report.md", "report.sarif", "report.html"}
    _run(tmp_path, *cache)
    assert _reports(tmp_path) == first  # not written again: same bytes, same modification times
    (tmp_path / "r" / "report.md").write_text("edited")
    (tmp_path / "r" / "report.sarif").unlink()
    _run(tmp_path, *cache)
    again = _reports(tmp_path)
    assert {name: data for name, (data, _) in again.items()} == {name: data for name, (data, _) in first.items()}
    assert again["report.md"][1] != first["report.md"][1]  # made again, all of them
    _run(tmp_path, "--no-cache")
    assert {name: data for name, (data, _) in _reports(tmp_path).items()} == \
        {name: data for name, (data, _) in first.items()}
    (tmp_path / "repo" / "model.py").write_text("import torch\n\ndef f(x):\n    return x.cuda(0)\n")
    _run(tmp_path, *cache)
    assert b"x.cuda(0)" in _reports(tmp_path)["changes.patch"][0]
