"""Issue 12, items 1 and 3: no write outside --out/--report-dir, no user file overwritten, and clean
failures (one line, the documented exit code, a report saying what was and was not written)."""

import json
import os
import subprocess
from contextlib import contextmanager

import pytest

from npu_migrate.migrate import exitcodes
from tests.cli.conftest import fake_rules, git_init, invoke, snapshot, write_tree  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("fake_rules")
CUDA = "import torch\n\nx = torch.zeros(3).cuda()\n"
GLUED = "def f(t):\n    return t.glue()\n"


@pytest.fixture
def repo(tmp_path):
    return write_tree(tmp_path / "repo", {"train.py": CUDA, "pkg/__init__.py": "", "pkg/m.py": GLUED,
                                          "report.md": "# my own notes\n"})


def _report(directory):
    return json.loads((directory / "report.json").read_text())


def test_an_output_path_that_links_to_path_is_refused(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.symlink(repo, tmp_path / "repo-npu")
    before = snapshot(repo)
    result = invoke(repo)
    assert result.exit_code == exitcodes.CONFIG_ERROR
    assert "overlaps PATH" in result.stderr
    assert snapshot(repo) == before


@pytest.mark.parametrize("where", [".", "..", "notes"])
def test_a_report_dir_that_is_path_above_it_or_holds_other_files_is_refused(repo, tmp_path, where):
    write_tree(repo, {"notes/todo.md": "mine\n"})
    before = snapshot(repo)
    result = invoke(repo, "--out", tmp_path / "out", "--report-dir", repo / where)
    assert result.exit_code == exitcodes.CONFIG_ERROR and "report directory" in result.stderr
    assert snapshot(repo) == before and (repo / "report.md").read_text() == "# my own notes\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["repo/.cache", "repo", "out/c", "r/cache"])
def test_a_cache_dir_in_path_or_an_output_is_refused(repo, tmp_path, where):
    """Issue 25 item 1: a cache inside PATH would be written there (and left after --revert)."""
    before = snapshot(repo)
    result = invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r", "--cache-dir", tmp_path / where)
    assert result.exit_code == exitcodes.CONFIG_ERROR and "the cache directory" in result.stderr
    assert "overlaps" in result.stderr
    assert snapshot(repo) == before and not (tmp_path / "out").exists() and not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_default_cache_in_path_is_not_used(repo, tmp_path, monkeypatch):
    git_init(repo)
    monkeypatch.setenv("NPU_MIGRATE_CACHE_DIR", str(repo / ".cache" / "npu-migrate"))
    result = invoke(repo, "--in-place", "--report-dir", tmp_path / "r")
    assert result.exit_code == 0, result.output
    assert "running without the cache" in result.stderr and not (repo / ".cache").exists()
    reverted = invoke(repo, "--in-place", "--revert", "--report-dir", tmp_path / "r")
    assert reverted.exit_code == 0, reverted.output
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == ""  # the tree is clean again: nothing of the cache was left in it


@pytest.mark.slow
def test_a_new_report_dir_inside_path_is_allowed_and_left_out_of_the_migration(repo, tmp_path):
    """CI keeps its reports in the checkout: ``--report-dir reports`` inside PATH, run after run."""
    for _ in range(2):  # the second run finds the first one's reports there
        result = invoke(repo, "--check", "--report-dir", repo / "reports")
        assert not result.exit_code & exitcodes.CONFIG_ERROR, result.output
        report = json.loads((repo / "reports/report.json").read_text())
        assert all(not f["path"].startswith("reports/") for f in report["files"])
        assert {"path": "reports/", "reason": "the output or report directory of this run"} in report["excluded"]
    assert not (tmp_path / "repo-npu").exists()  # --check writes no tree, only the reports asked for


def test_the_default_report_dir_moves_beside_path_when_cwd_is_inside_it(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(repo)
    result = invoke(".", "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "repo-npu-report/report.json").is_file()
    assert not (repo / "npu-migrate-report").exists()


def test_a_symlinked_directory_inside_out_is_never_followed(repo, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "m.py").write_text("precious\n")
    (tmp_path / "out").mkdir()
    os.symlink(elsewhere, tmp_path / "out/pkg")
    os.symlink(elsewhere / "m.py", tmp_path / "out/train.py")  # a link where a file goes is replaced
    result = invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r")
    assert (elsewhere / "m.py").read_text() == "precious\n"
    assert not (tmp_path / "out/train.py").is_symlink() and ".npu()" in (tmp_path / "out/train.py").read_text()
    assert result.exit_code == exitcodes.FILE_ERRORS
    report = _report(tmp_path / "r")
    failed = {e["path"]: e["error"] for e in report["written"]["not_written"]}
    assert "pkg/m.py" in failed and "symbolic link" in failed["pkg/m.py"]


def test_a_users_npu_glue_is_never_replaced(repo, tmp_path):
    write_tree(repo, {"pkg/npu_glue.py": "MINE = 1\n"})
    result = invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r")
    assert result.exit_code == exitcodes.FILE_ERRORS
    assert (tmp_path / "out/pkg/npu_glue.py").read_text() == "MINE = 1\n"
    assert (tmp_path / "out/pkg/m.py").read_text() == GLUED  # left unchanged: it needs the helper
    files = {f["path"]: f for f in _report(tmp_path / "r")["files"]}
    assert "NPU011" in files["pkg/m.py"]["error"]
    assert "npu_glue" not in (tmp_path / "r/changes.patch").read_text()
    assert files["train.py"]["status"] == "changed"


def test_a_symlinked_npu_glue_is_never_read(repo, tmp_path):
    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0:secret\n")
    os.symlink(secret, repo / "pkg/npu_glue.py")
    result = invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r")
    assert result.exit_code == exitcodes.FILE_ERRORS
    for name in ("changes.patch", "report.json", "report.md"):
        assert "secret" not in (tmp_path / "r" / name).read_text(), name
    assert os.readlink(tmp_path / "out/pkg/npu_glue.py") == str(secret)  # copied as the link it is


def test_a_report_dir_that_is_a_file_fails_before_any_write(repo, tmp_path):
    (tmp_path / "r").write_text("x")
    result = invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r")
    assert result.exit_code == exitcodes.CONFIG_ERROR and "not a directory" in result.stderr
    assert not (tmp_path / "out").exists()


@contextmanager
def _tmpfs(path, size="64k", readonly=False):
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        if readonly:
            subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_read_only_out_is_a_config_error(repo, tmp_path):
    with _tmpfs(tmp_path / "ro", readonly=True) as ro:
        result = invoke(repo, "--out", ro / "out", "--report-dir", tmp_path / "r")
    assert result.exit_code == exitcodes.CONFIG_ERROR
    assert "Read-only file system" in result.stderr and "Traceback" not in result.output


@pytest.mark.slow
def test_a_full_disk_is_reported_with_what_was_written(tmp_path):
    repo = write_tree(tmp_path / "repo", {f"m{i}.py": CUDA + "# " + "x" * 3000 + "\n" for i in range(40)})
    with _tmpfs(tmp_path / "small", size="48k") as small:
        result = invoke(repo, "--out", small / "out", "--report-dir", tmp_path / "r")
        left = [p.name for p in small.rglob("*") if p.name.endswith(".tmp")]
    assert result.exit_code == exitcodes.FILE_ERRORS, result.output
    assert "No space left on device" in result.stderr and "Traceback" not in result.output
    written = _report(tmp_path / "r")["written"]
    assert not written["complete"] and written["files"] and written["not_written"]
    assert len(written["files"]) + len(written["not_written"]) == 40
    assert not left


@pytest.mark.slow
def test_in_place_interrupted_by_a_full_disk_can_be_resumed_and_reverted(tmp_path):
    with _tmpfs(tmp_path / "disk", size="256k") as disk:
        repo = write_tree(disk / "repo", {f"m{i}.py": CUDA + "# " + "x" * 12000 + "\n" for i in range(6)})
        git_init(repo)
        filler = disk / "filler"
        original = snapshot(repo)
        with open(filler, "wb", buffering=0) as handle:  # fill the disk to the last byte
            try:
                while handle.write(b"\0" * 4096):
                    pass
            except OSError:
                pass
        os.truncate(filler, os.path.getsize(filler) - 8192)  # room for git's lock file, not for a 12 kB file
        result = invoke(repo, "--in-place", "--report-dir", tmp_path / "r")
        assert result.exit_code & exitcodes.FILE_ERRORS, result.output
        assert "--resume" in result.stdout
        assert not [p for p in repo.rglob("*") if p.name.endswith(".tmp")]
        again = invoke(repo, "--in-place", "--force", "--report-dir", tmp_path / "r")
        assert again.exit_code == exitcodes.CONFIG_ERROR and "did not finish" in again.stderr
        filler.unlink()
        resumed = invoke(repo, "--in-place", "--resume", "--report-dir", tmp_path / "r")
        assert resumed.exit_code == 0, resumed.output
        assert all(".npu()" in (repo / f"m{i}.py").read_text() for i in range(6))
        reverted = invoke(repo, "--in-place", "--revert", "--report-dir", tmp_path / "r")
        assert reverted.exit_code == 0, reverted.output
        assert snapshot(repo) == original


def test_in_place_with_a_directory_named_npu_glue_never_half_migrates(repo, tmp_path):
    (repo / "pkg/npu_glue.py").mkdir()
    git_init(repo, commit=False)
    (repo / "pkg/npu_glue.py/keep").write_text("x\n")
    result = invoke(repo, "--in-place", "--force", "--report-dir", tmp_path / "r")
    assert result.exit_code == exitcodes.FILE_ERRORS, result.output
    assert (repo / "pkg/m.py").read_text() == GLUED  # needs the helper: left unchanged, not importing a missing one
    assert ".npu()" in (repo / "train.py").read_text()
    files = {f["path"]: f for f in _report(tmp_path / "r")["files"]}
    assert "NPU011" in files["pkg/m.py"]["error"] and "directory" in files["pkg/m.py"]["error"]
    assert _report(tmp_path / "r")["written"]["complete"]
