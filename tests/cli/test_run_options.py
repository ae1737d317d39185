"""``migrate run`` options for review and CI: ``--check`` names what would change, ``--statistics``,
``--no-fused``, ``--select``/``--ignore`` refuse unknown codes, and the summary line says what
report.json says."""

import json
import re

import pytest

from npu_migrate.migrate import exitcodes
from tests.cli.conftest import invoke, migrate_demo, write_tree

CUDA = "import torch\n\nx = torch.zeros(3).cuda()\n"
DOUBLE = "import torch\n\ny = torch.zeros(3).double()\n"


@pytest.fixture
def repo(tmp_path, fake_rules):
    return write_tree(tmp_path / "repo", {"train.py": CUDA, "pkg/__init__.py": "", "pkg/glued.py": "def f(t):\n    return t.glue()\n",
                                          "model/layers.py": DOUBLE, "model/plain.py": "x = 1\n"})


@pytest.mark.slow
def test_check_lists_the_files_that_would_change_and_the_sites_that_need_attention(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke(repo, "--check")
    assert result.exit_code == exitcodes.WOULD_CHANGE | exitcodes.UNSUPPORTED
    err = result.stdout  # the listing is the command's output
    listing = err[err.index("Would change 3 files:"):]
    assert "  pkg/glued.py (1 rewrite)" in listing and "  pkg/npu_glue.py (new helper module)" in listing
    assert "  train.py (1 rewrite)" in listing and "layers.py (" not in listing
    assert "Needs attention (1 site):" in err
    assert "  model/layers.py:3:5: NPU902 NPUs have no float64" in err  # 1-based column, as ruff and editors
    assert "  = plan (cpu): keep this computation on the CPU or use float32" in err
    assert not (tmp_path / "repo-npu").exists() and not (tmp_path / "npu-migrate-report").exists()


@pytest.mark.slow
def test_the_summary_line_says_what_report_json_says(repo, tmp_path):
    write_tree(repo, {"broken.py": "x = (.cuda(\n"})
    result = invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r")
    s = json.loads((tmp_path / "r/report.json").read_text())["summary"]
    line = result.stdout.replace("\n", " ")
    expected = (f"{s['files_scanned']} Python files scanned ({s['files_other']} other files, {s['files_excluded']} excluded): "
                f"{s['files_changed']} changed, "
                f"{s['files_unchanged']} unchanged, {s['files_skipped']} skipped (nothing to migrate), "
                f"{s['files_errored']} with errors; {s['sites_rewritten']} sites rewritten")
    assert expected in line, line
    assert (s["files_unchanged"], s["files_skipped"]) == (1, 2)  # model/layers.py; __init__.py and plain.py
    assert f"{s['sites_reported']} need attention, {s['sites_suppressed']} suppressed." in line


@pytest.mark.slow
def test_statistics_counts_each_code_with_its_summary(repo, tmp_path):
    write_tree(repo, {"more.py": "import torch\na = torch.ones(1).cuda()\nb = torch.ones(1).cuda()\n"})
    result = invoke(repo, "--check", "--statistics")
    lines = result.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [["4", "NPU901"], ["1", "NPU902"]]  # most frequent first
    assert lines[0].endswith("test rule: .cuda() becomes .npu()") and "4 rewritten" in lines[0]
    assert "1 reported" in lines[1] and lines[1].endswith("test rule: .double() is reported")


@pytest.mark.parametrize("option, value, named", [
    ("--select", "BOGUS", "'BOGUS'"),
    ("--select", "NPU901,npu9o2", "'NPU9O2'"),
    ("--ignore", "NPU7", "'NPU7'"),
    ("--select", "NPU9,NPU8,X", "'NPU8', 'X'"),
])
def test_unknown_codes_are_a_usage_error_naming_them(repo, tmp_path, option, value, named):
    result = invoke(repo, "--check", option, value)
    assert result.exit_code == exitcodes.USAGE_ERROR
    assert f"unknown diagnostic code" in result.stderr and named in result.stderr
    assert not (tmp_path / "repo-npu").exists()


@pytest.mark.slow
def test_known_codes_and_prefixes_are_accepted(repo):
    assert invoke(repo, "--check", "--select", "npu9").exit_code == exitcodes.WOULD_CHANGE | exitcodes.UNSUPPORTED
    assert invoke(repo, "--check", "--select", "NPU901", "--ignore", "NPU0").exit_code == exitcodes.WOULD_CHANGE


@pytest.mark.slow
def test_no_fused_runs_the_device_rewrites_only(tmp_path):
    """On the demo with the real rules: --no-fused is --ignore NPU3, and leaves the device rewrites."""
    _, out, reports, _ = migrate_demo(tmp_path / "a", "--no-fused")
    no_fused = json.loads((reports / "report.json").read_text())
    _, _, ignored, _ = migrate_demo(tmp_path / "b", "--ignore", "NPU3")
    _, _, full, _ = migrate_demo(tmp_path / "c")
    assert no_fused["findings"] == json.loads((ignored / "report.json").read_text())["findings"]
    codes = {f["code"] for f in no_fused["findings"]}
    assert not any(code.startswith("NPU3") for code in codes) and {"NPU201", "NPU203"} <= codes
    assert {f["safety"] for f in no_fused["findings"] if f["action"] == "rewritten"} == {"safe"}
    everything = json.loads((full / "report.json").read_text())["findings"]
    assert [f for f in everything if not f["code"].startswith("NPU3")] == no_fused["findings"]
    assert "npu_fusion_attention" not in (out / "tinyllama/model.py").read_text()
    assert ".npu()" in (out / "train.py").read_text()


def test_parity_option_puts_the_result_on_the_page(repo, tmp_path):
    parity = tmp_path / "parity.json"
    parity.write_text(json.dumps({"passed": True, "original": "o", "migrated": "m", "backing": "cpu", "cases": []}))
    result = invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r", "--parity", parity)
    assert result.exit_code == 0, result.output
    assert "Parity: passed" in (tmp_path / "r/report.html").read_text()
    parity.write_text("[1, 2")
    result = invoke(repo, "--out", tmp_path / "out2", "--report-dir", tmp_path / "r2", "--parity", parity)
    assert result.exit_code == exitcodes.CONFIG_ERROR and "not valid JSON" in result.stderr
    assert not (tmp_path / "out2").exists()


@pytest.mark.slow
def test_sites_print_as_written(repo, tmp_path):
    """Rich markup and emoji codes in paths or messages are printed literally (``:100:`` is a line)."""
    write_tree(repo, {"model/[red]x.py": "\n" * 98 + "import torch\nz = torch.zeros(1).double()\n"})
    result = invoke(repo, "--check")
    assert re.search(r"model/\[red\]x\.py:100:5: NPU902", result.stdout), result.stdout
