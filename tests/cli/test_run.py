"""``migrate run`` end to end on small repos, with the stand-in rules of conftest.py."""

import json

import pytest

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.outputs import report_json
from npu_migrate.opmap import PLANS
from npu_migrate.migrate.helpers.assemble import assemble
from tests.cli.conftest import git, git_init, invoke, snapshot, write_tree

CUDA = "import torch\n\nx = torch.zeros(3).cuda()\n"
DOUBLE = "import torch\n\ny = torch.zeros(3).double()\n"

pytestmark = pytest.mark.usefixtures("fake_rules")


@pytest.fixture
def repo(tmp_path):
    return write_tree(tmp_path / "repo", {
        "train.py": CUDA,
        "model/__init__.py": "",
        "model/layers.py": DOUBLE,
        "model/plain.py": "def f():\n    return 1\n",
        "configs/base.yaml": "lr: 0.1\n",
        "README.md": "# repo\n",
        ".gitignore": "*.log\nbuild/\n",
        "run.log": "ignored\n",
        "build/out.py": CUDA,
        "model/__pycache__/layers.cpython-311.pyc": b"\0\1",
    })


def _report(report_dir):
    return json.loads((report_dir / "report.json").read_text())


@pytest.mark.slow
def test_default_output_is_a_sibling_tree_with_every_file(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = snapshot(repo)
    result = invoke(repo)
    assert result.exit_code == 0, result.output
    out = tmp_path / "repo-npu"
    assert (out / "train.py").read_text() == "import torch\nimport torch_npu  # noqa: F401\n\nx = torch.zeros(3).npu()\n"
    for rel in ("model/__init__.py", "model/layers.py", "model/plain.py", "configs/base.yaml", "README.md", ".gitignore"):
        assert (out / rel).read_bytes() == (repo / rel).read_bytes(), rel
    for ignored in ("run.log", "build/out.py", "model/__pycache__"):
        assert not (out / ignored).exists(), ignored
    assert snapshot(repo) == before, "PATH was written without --in-place"
    reports = tmp_path / "npu-migrate-report"
    assert {p.name for p in reports.iterdir()} == {"changes.patch", "report.json", "report.md", "report.sarif",
                                                   "report.html"}
    assert "repo-npu" in result.stdout and "changes.patch" in result.stdout


@pytest.mark.slow
def test_check_sets_exit_bits_and_writes_nothing(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke(repo, "--check")
    assert result.exit_code == exitcodes.WOULD_CHANGE | exitcodes.UNSUPPORTED
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]
    assert invoke(repo, "--check", "--ignore", "NPU902").exit_code == exitcodes.WOULD_CHANGE
    assert invoke(repo, "--check", "--select", "NPU902").exit_code == exitcodes.UNSUPPORTED
    assert invoke(repo, "--check", "--select", "NPU903").exit_code == exitcodes.OK


def test_diff_prints_the_patch_and_writes_nothing(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke(repo, "--diff")
    assert result.exit_code == 0
    assert result.stdout.startswith("diff --git a/train.py b/train.py\n--- a/train.py\n+++ b/train.py\n")
    assert "+x = torch.zeros(3).npu()\n" in result.stdout
    assert not (tmp_path / "repo-npu").exists() and not (tmp_path / "npu-migrate-report").exists()


@pytest.mark.slow
def test_select_and_ignore_choose_the_codes(repo, tmp_path):
    reports = tmp_path / "r"
    invoke(repo, "--out", tmp_path / "o1", "--report-dir", reports, "--select", "npu901")
    assert _report(reports)["summary"]["by_code"] == {"NPU901": 1}
    invoke(repo, "--out", tmp_path / "o2", "--report-dir", reports, "--ignore", "NPU901")
    assert _report(reports)["summary"]["by_code"] == {"NPU902": 1}
    invoke(repo, "--out", tmp_path / "o3", "--report-dir", reports, "--select", "NPU9")
    assert _report(reports)["summary"]["by_code"] == {"NPU901": 1, "NPU902": 1}


@pytest.mark.slow
def test_bad_files_become_errors_and_the_run_goes_on(repo, tmp_path):
    write_tree(repo, {
        "broken.py": "x = torch.zeros(.cuda(\n",
        "latin1.py": b"# caf\xe9\nx = t.cuda()\n",
        "crash.py": "CRASH_ME = t.cuda()\n",
    })
    reports = tmp_path / "r"
    result = invoke(repo, "--out", tmp_path / "out", "--report-dir", reports)
    assert result.exit_code == exitcodes.FILE_ERRORS
    files = {f["path"]: f for f in _report(reports)["files"]}
    assert files["broken.py"]["status"] == "error" and "broken.py" in files["broken.py"]["error"]
    assert "parse" in files["broken.py"]["error"]
    assert "UTF-8" in files["latin1.py"]["error"]
    assert "crashed" in files["crash.py"]["error"] and "boom" in files["crash.py"]["error"]
    assert files["train.py"]["status"] == "changed"
    for rel in ("broken.py", "latin1.py", "crash.py"):  # copied unchanged
        assert (tmp_path / "out" / rel).read_bytes() == (repo / rel).read_bytes()
    assert "crash.py" in result.stderr


@pytest.mark.slow
def test_report_json_schema(repo, tmp_path):
    write_tree(repo, {"broken.py": "def (\n    x.cuda()\n"})
    reports = tmp_path / "r"
    invoke(repo, "--out", tmp_path / "out", "--report-dir", reports)
    report = _report(reports)
    assert report["schema_version"] == report_json.SCHEMA_VERSION == 5
    assert report["summary"] == {
        "files_scanned": 5, "files_changed": 1, "files_unchanged": 1, "files_skipped": 2, "files_errored": 1,
        "files_other": 3, "files_excluded": 3, "sites_rewritten": 1, "sites_reported": 1, "sites_suppressed": 0,
        "rewrites_by_safety": {"safe": 0, "numerics-changing": 0},
        "by_code": {"NPU001": 1, "NPU901": 1, "NPU902": 1},
        "files_by_kind": {"python": 5}, "packages_declared": 0,
        "packages_by_status": {"compatible": 0, "replace": 0, "unsupported": 0, "unlisted": 0}, "environment_sites": 0,
    }
    assert report["dependencies"] == {"packages": [], "environment": []}
    assert report["excluded"] == [{"path": "build/", "reason": "ignored by .gitignore (pattern 'build/')"},
                                  {"path": "model/__pycache__/", "reason": "bytecode cache"},
                                  {"path": "run.log", "reason": "ignored by .gitignore (pattern '*.log')"}]
    assert [f["path"] for f in report["files"]] == ["broken.py", "model/__init__.py", "model/layers.py",
                                                    "model/plain.py", "train.py"]
    keys = ["code", "path", "line", "col", "cell", "message", "api", "action", "safety", "target", "fallback", "snippet"]
    for finding in report["findings"]:
        assert list(finding) == keys
        assert finding["action"] in ("rewritten", "reported")
        assert finding["safety"] is None  # NPU9xx test codes are neither device (NPU2) nor fused (NPU3) rewrites
        if finding["code"].startswith("NPU0"):
            assert finding["fallback"] is None and finding["message"]
        elif finding["action"] == "reported":
            assert finding["fallback"]["plan"] in PLANS and finding["fallback"]["detail"]
    double = next(f for f in report["findings"] if f["code"] == "NPU902")
    assert (double["path"], double["line"], double["col"], double["cell"]) == ("model/layers.py", 3, 5, None)  # 1-based
    assert double["snippet"] == "y = torch.zeros(3).double()"
    assert next(f for f in report["findings"] if f["code"] == "NPU001")["snippet"] is None  # the file did not parse
    markdown = (reports / "report.md").read_text()
    assert "## Needs attention" in markdown and "keep this computation on the CPU" in markdown
    assert "`model/layers.py:3:5`" in markdown and "broken.py:2:1: NPU001" in markdown


@pytest.mark.slow
def test_patch_applies_with_git_including_no_newline_and_helper(tmp_path):
    repo = write_tree(tmp_path / "repo", {
        "a.py": "import torch\nx = torch.ones(2).cuda()",  # no trailing newline
        "pkg/__init__.py": "",
        "pkg/b.py": "import torch\n\n\ndef f(t):\n    return t.glue()\n",
        "c.py": "import torch\r\ny = torch.ones(2).cuda()\r\n",  # CRLF
        "notes.txt": "not python\n",
    })
    git_init(repo)
    reports = tmp_path / "r"
    result = invoke(repo, "--out", tmp_path / "out", "--report-dir", reports)
    assert result.exit_code == 0, result.output
    patch = (reports / "changes.patch").read_text()
    assert "\\ No newline at end of file" in patch
    assert "new file mode 100644\n--- /dev/null\n+++ b/pkg/npu_glue.py\n" in patch
    assert (tmp_path / "out/pkg/npu_glue.py").read_text() == assemble(())  # the core: b.py calls no function of it
    assert "from .npu_glue import npu_glue" in (tmp_path / "out/pkg/b.py").read_text()
    git(repo, "apply", "--check", str(reports / "changes.patch"))
    git(repo, "apply", str(reports / "changes.patch"))
    after = snapshot(repo)
    assert after == snapshot(tmp_path / "out")


@pytest.mark.slow
def test_jobs_2_gives_the_same_results_as_jobs_1(tmp_path):
    files = {f"m{i:02d}.py": (DOUBLE if i % 6 else CUDA) for i in range(24)}  # > 20: the progress bar path
    repo = write_tree(tmp_path / "repo", files)
    for jobs in ("1", "2"):
        result = invoke(repo, "--out", tmp_path / f"out{jobs}", "--report-dir", tmp_path / f"r{jobs}", "--jobs", jobs)
        assert result.exit_code == 0
    assert _report(tmp_path / "r1") == _report(tmp_path / "r2")
    assert (tmp_path / "r1/changes.patch").read_text() == (tmp_path / "r2/changes.patch").read_text()
    assert snapshot(tmp_path / "out1") == snapshot(tmp_path / "out2")


@pytest.mark.slow
def test_migrating_the_output_again_changes_nothing(repo, tmp_path):
    write_tree(repo, {"model/glued.py": "def f(t):\n    return t.glue()\n"})
    invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r1")
    assert (tmp_path / "out/model/npu_glue.py").exists()
    result = invoke(tmp_path / "out", "--out", tmp_path / "out2", "--report-dir", tmp_path / "r2")
    assert result.exit_code == 0
    summary = _report(tmp_path / "r2")["summary"]
    assert summary["files_changed"] == 0 and summary["sites_rewritten"] == 0
    assert (tmp_path / "r2/changes.patch").read_text() == ""
    assert snapshot(tmp_path / "out2") == snapshot(tmp_path / "out")


def test_bad_opmap_is_a_config_error_with_file_and_line(repo, tmp_path):
    bad = tmp_path / "extra.yaml"
    bad.write_text("- api: torch.cuda.foo\n  status: native\n  colour: blue\n")
    result = invoke(repo, "--opmap", bad, "--out", tmp_path / "out", "--report-dir", tmp_path / "r")
    assert result.exit_code == exitcodes.CONFIG_ERROR
    assert f"{bad}:3" in result.stderr.replace("\n", "")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, message", [
    (["missing"], "not a directory"),
    (["repo", "--out", "repo/sub"], "overlaps"),
    (["repo", "--out", "."], "overlaps"),
    (["repo", "--out", "x", "--in-place"], "cannot be used together"),
])
def test_config_errors(repo, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    result = invoke(*args)
    assert result.exit_code == exitcodes.CONFIG_ERROR
    assert message in result.stderr


def test_in_place_is_refused_on_a_dirty_git_tree(repo, tmp_path):
    git_init(repo)
    (repo / "model/plain.py").write_text("def f():\n    return 2\n")
    before = snapshot(repo)
    result = invoke(repo, "--in-place", "--report-dir", tmp_path / "r")
    assert result.exit_code == exitcodes.CONFIG_ERROR
    assert "uncommitted changes" in result.stderr and "model/plain.py" in result.stderr
    assert snapshot(repo) == before and not (tmp_path / "r").exists()


def test_in_place_on_a_clean_git_tree_writes_only_changed_files(repo, tmp_path):
    git_init(repo)
    result = invoke(repo, "--in-place", "--report-dir", tmp_path / "r")
    assert result.exit_code == 0, result.output
    assert ".npu()" in (repo / "train.py").read_text()
    changed = git(repo, "status", "--porcelain").stdout.split()
    assert changed == ["M", "train.py"]  # no backups, nothing else touched
    assert not (tmp_path / "repo-npu").exists()


def test_in_place_with_force_keeps_backups(repo, tmp_path):
    assert invoke(repo, "--in-place", "--report-dir", tmp_path / "r").exit_code == exitcodes.CONFIG_ERROR  # not git
    result = invoke(repo, "--in-place", "--force", "--report-dir", tmp_path / "r")
    assert result.exit_code == 0, result.output
    assert (repo / "train.py.orig").read_text() == CUDA
    assert ".npu()" in (repo / "train.py").read_text()
    assert not (repo / "model/layers.py.orig").exists()



# -- issue 25: scripts by their shebang, paths over PATH_MAX --------------------------------------------
@pytest.mark.slow
def test_a_python_script_without_the_suffix_is_migrated_keeping_its_mode(tmp_path):
    repo = write_tree(tmp_path / "repo", {"bin/train": "#!/usr/bin/env python3\n" + CUDA, "bin/run.sh": "#!/bin/sh\n"})
    (repo / "bin/train").chmod(0o755)
    result = invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r")
    assert result.exit_code == 0, result.output
    out = tmp_path / "out/bin/train"
    assert out.read_text() == ("#!/usr/bin/env python3\nimport torch\nimport torch_npu  # noqa: F401\n\n"
                               "x = torch.zeros(3).npu()\n")
    assert out.stat().st_mode & 0o777 == 0o755
    assert "+x = torch.zeros(3).npu()" in (tmp_path / "r/changes.patch").read_text()
    assert (tmp_path / "out/bin/run.sh").read_text() == "#!/bin/sh\n"


def test_a_path_over_path_max_is_reported_and_the_rest_is_migrated(tmp_path):
    from tests.outputs.test_discovery import _deep

    repo = write_tree(tmp_path / "repo", {"train.py": CUDA})
    _deep(repo)
    result = invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r")
    assert result.exit_code == exitcodes.FILE_ERRORS, result.output
    assert "Traceback" not in result.output
    errors = [f for f in _report(tmp_path / "r")["files"] if f["status"] == "error"]
    assert len(errors) == 1 and "NPU020" in errors[0]["error"] and "PATH_MAX" in errors[0]["error"]
    assert ".npu()" in (tmp_path / "out/train.py").read_text()
    assert _report(tmp_path / "r")["written"]["not_written"] == []
