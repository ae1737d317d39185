"""Issue 21 item 2: the conventions of ruff-like tools. Primary output on stdout, diagnostics on
stderr; 1-based columns that the console, JSON and SARIF agree on; --output-format, --version,
--quiet, --exit-zero; help that reads in any width; a single file or stdin as PATH; --exclude and
``# npu-migrate: ignore-file``; ``--statistics`` without migrating again."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from npu_migrate.migrate import __version__, exitcodes
from npu_migrate.migrate.cli import app
from tests.cli.conftest import fake_rules, invoke, snapshot, write_tree  # noqa: F401  (fixture)

CUDA = "import torch\n\nx = torch.zeros(3).cuda()\n"
DOUBLE = "import torch\n\n\ndef f():\n    y = torch.zeros(3).double()\n    return y\n"


@pytest.fixture
def repo(tmp_path, fake_rules):
    return write_tree(tmp_path / "repo", {"train.py": CUDA, "model/layers.py": DOUBLE})


def run(*args, input=None):
    return CliRunner().invoke(app, [*map(str, args)], input=input, catch_exceptions=False)


def test_version():
    result = run("--version")
    assert result.exit_code == 0 and result.stdout == f"migrate (npu-migrate) {__version__}\n"


@pytest.mark.slow
def test_the_summary_and_lists_go_to_stdout_and_machine_formats_keep_it_to_themselves(repo, tmp_path):
    human = invoke(repo, "--check")
    assert "Would change" in human.stdout and "Python files scanned" in human.stdout
    assert "Python files scanned" not in human.stderr
    machine = invoke(repo, "--check", "--output-format", "json")
    findings = json.loads(machine.stdout)  # nothing else on stdout
    assert {f["code"] for f in findings} == {"NPU901", "NPU902"}
    assert "Python files scanned" in machine.stderr
    lines = invoke(repo, "--check", "--output-format", "json-lines").stdout.splitlines()
    assert [json.loads(line) for line in lines] == findings
    diff = invoke(repo, "--diff")
    assert diff.stdout.startswith("diff --git a/") and "Python files scanned" in diff.stderr
    assert invoke(repo, "--diff", "--output-format", "json").exit_code == exitcodes.USAGE_ERROR  # one owner of stdout
    stats = json.loads(invoke(repo, "--statistics", "--output-format", "json").stdout)
    assert {row["code"]: row["count"] for row in stats} == {"NPU901": 1, "NPU902": 1}


def test_columns_are_one_based_in_the_console_json_sarif_and_github(repo):
    (f,) = [f for f in json.loads(invoke(repo, "--check", "--output-format", "json").stdout) if f["code"] == "NPU902"]
    assert (f["line"], f["col"]) == (5, 9)  # "    y = torch.zeros(3).double()": .double starts in column 9
    assert "model/layers.py:5:9: NPU902" in invoke(repo, "--check", "--output-format", "concise").stdout
    sarif = json.loads(invoke(repo, "--check", "--output-format", "sarif").stdout)
    (result,) = [r for r in sarif["runs"][0]["results"] if r["ruleId"] == "NPU902"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (5, 9)
    github = invoke(repo, "--check", "--output-format", "github").stdout
    assert "::warning file=model/layers.py,line=5,col=9,title=npu-migrate NPU902::" in github
    assert "::notice file=train.py,line=3,col=" in github


def test_full_shows_the_source_line_and_the_plan_concise_one_line(repo):
    full = invoke(repo, "--check").stdout
    assert "        5 | y = torch.zeros(3).double()" in full and "= plan (cpu): keep this computation" in full
    concise = invoke(repo, "--check", "--output-format", "concise").stdout
    assert "  model/layers.py:5:9: NPU902 NPUs have no float64 [plan: cpu]" in concise and " | " not in concise


@pytest.mark.slow
def test_quiet_prints_the_findings_only_and_exit_zero_clears_the_check_bits(repo, tmp_path):
    quiet = invoke(repo, "--check", "--quiet")
    assert quiet.exit_code == exitcodes.WOULD_CHANGE | exitcodes.UNSUPPORTED
    assert "NPU902" in quiet.stdout and "Python files scanned" not in quiet.stdout + quiet.stderr
    assert invoke(repo, "--check", "--exit-zero").exit_code == 0
    write_tree(repo, {"broken.py": "import torch\nx = (.cuda(\n"})
    assert invoke(repo, "--check", "--exit-zero").exit_code == exitcodes.FILE_ERRORS  # errors still count
    written = invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r", "-q")
    assert "Migrated tree" not in written.stdout + written.stderr and (tmp_path / "r/report.json").is_file()


@pytest.mark.slow
def test_a_single_file_as_path(repo, tmp_path):
    result = invoke(repo / "model/layers.py", "--check", "--output-format", "json")
    assert [f["path"] for f in json.loads(result.stdout)] == ["layers.py"]
    result = invoke(repo / "train.py", "--out", tmp_path / "one", "--report-dir", tmp_path / "r")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["train.py"]
    assert ".npu()" in (tmp_path / "one/train.py").read_text()


@pytest.mark.slow
def test_stdin_prints_the_migrated_source(repo):
    result = run("run", "-", "--stdin-filename", repo / "train.py", "--no-cache", input=CUDA)
    assert result.exit_code == 0
    assert result.stdout == "import torch\nimport torch_npu  # noqa: F401\n\nx = torch.zeros(3).npu()\n"
    check = run("run", "-", "--stdin-filename", repo / "model/layers.py", "--check", "--output-format", "concise",
                "--no-cache", input=DOUBLE)
    assert check.exit_code == exitcodes.UNSUPPORTED and "layers.py:5:9: NPU902" in check.stdout
    diff = run("run", "-", "--diff", "--no-cache", input=CUDA)
    assert "+x = torch.zeros(3).npu()" in diff.stdout
    assert run("run", "-", "--in-place", input=CUDA).exit_code == exitcodes.USAGE_ERROR


@pytest.mark.slow
def test_exclude_and_ignore_file(repo, tmp_path):
    write_tree(repo, {"vendor/lib.py": CUDA, "skip.py": "# npu-migrate: ignore-file\n" + CUDA})
    result = invoke(repo, "--exclude", "vendor/", "--out", tmp_path / "out", "--report-dir", tmp_path / "r")
    report = json.loads((tmp_path / "r/report.json").read_text())
    assert "vendor/lib.py" not in [f["path"] for f in report["files"]]
    assert any(e["path"] == "vendor/lib.py" and "--exclude" in e["reason"] for e in report["excluded"])
    assert (tmp_path / "out/vendor/lib.py").read_text() == CUDA  # copied unchanged
    assert (tmp_path / "out/skip.py").read_text() == "# npu-migrate: ignore-file\n" + CUDA
    assert [f["action"] for f in report["findings"] if f["path"] == "skip.py"] == ["suppressed"]
    assert result.exit_code == 0


def test_statistics_writes_nothing_and_report_reads_them_back(repo, tmp_path):
    before = snapshot(repo)
    stats = invoke(repo, "--statistics")
    assert stats.exit_code == 0 and not (tmp_path / "repo-npu").exists() and snapshot(repo) == before
    invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r")
    again = run("report", tmp_path / "r", "--statistics")
    assert again.exit_code == 0 and again.stdout == stats.stdout and "NPU901" in stats.stdout


@pytest.mark.slow
def test_explain_and_ops_print_on_stdout_whole_lines_in_a_pipe(tmp_path):
    page = run("explain", "NPU302")
    assert page.stdout.startswith("# NPU302:") and page.stderr == ""  # Markdown as written, for less/grep
    listing = run("ops", "list", "--status", "fused")
    assert all(len(line.split()) >= 3 for line in listing.stdout.splitlines()) and "records" in listing.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("- api: torch.x\n  status: " + "nonsense" * 20 + "\n")
    done = subprocess.run([sys.executable, "-m", "npu_migrate.migrate", "ops", "validate", str(bad)],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "40"})
    assert done.returncode == exitcodes.CONFIG_ERROR
    (line,) = done.stdout.splitlines()  # one problem, one line, whatever the width
    assert line.startswith(f"{bad}:2:")


@pytest.mark.slow
@pytest.mark.parametrize("width", ["40", "80", "200"])
def test_help_has_no_placeholders_and_wraps_whole_paragraphs(width):
    env = {**os.environ, "COLUMNS": width}
    for command in (["run", "--help"], ["parity", "--help"], ["--help"], ["ops", "list", "--help"]):
        done = subprocess.run([sys.executable, "-m", "npu_migrate.migrate", *command], capture_output=True, text=True,
                              env=env)
        assert done.returncode == 0
        assert "<bool>" not in done.stdout and "<str>" not in done.stdout and "list[Path]" not in done.stdout
        assert all(len(line) <= max(int(width), 80) for line in done.stdout.splitlines())
    done = subprocess.run([sys.executable, "-m", "npu_migrate.migrate", "parity", "--help"], capture_output=True,
                          text=True, env=env)
    paragraph = done.stdout[done.stdout.index("Exit code:"):].split("\n\n")[0]
    words = " ".join(paragraph.split())
    assert words.startswith("Exit code: 0 when every case passes, 64 when one does not (it diverged")
    lines = [line.strip() for line in paragraph.splitlines()]
    assert textwrap.fill(words, width=len(max(lines, key=len))) == "\n".join(lines)  # rewrapped as one paragraph
