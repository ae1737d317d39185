"""Issue 12, items 2 and 4: one file never ends the run, and Ctrl-C stops it within seconds.

Every case runs the real ``migrate run`` in a subprocess (a segfault on today's main would
otherwise take pytest down with it) on a tree holding the hostile file and an ordinary one, and
checks the exit code, the hostile file's NPU0xx result and that the ordinary file was migrated.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

OK = "import torch\n\nx = torch.zeros(3).cuda()\n"


def migrate(repo: Path, tmp: Path, *args: str, timeout: float = 300):
    env = {**os.environ, "NPU_MIGRATE_CACHE_DIR": str(tmp / "cache")}
    command = [sys.executable, "-m", "npu_migrate.migrate", "run", str(repo), "--out", str(tmp / "out"),
               "--report-dir", str(tmp / "r"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp)


def tree(tmp: Path, hostile: dict) -> Path:
    repo = tmp / "repo"
    repo.mkdir()
    (repo / "ok.py").write_text(OK)
    for name, text in hostile.items():
        (repo / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return repo


def results(tmp: Path) -> dict:
    report = json.loads((tmp / "r/report.json").read_text())
    return {f["path"]: f for f in report["files"]}


def assert_ok_migrated(tmp: Path) -> None:
    assert ".npu()" in (tmp / "out/ok.py").read_text()


DEEP = "import torch\nx = " + "(" * 1500 + "1" + ")" * 1500 + "\ny = x.cuda()\n"
ELIF = "import torch\n\ndef f(x):\n    if x == 0:\n        return 0\n" + "".join(
    f"    elif x == {i}:\n        return torch.zeros({i}).cuda()\n" for i in range(1, 1000))


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_parser_segfault_costs_only_that_file(tmp_path, jobs):
    repo = tree(tmp_path, {"deep.py": DEEP})
    done = migrate(repo, tmp_path, "--jobs", jobs)
    assert done.returncode == 16, done.stderr
    files = results(tmp_path)
    assert "NPU009" in files["deep.py"]["error"] and "SIGSEGV" in files["deep.py"]["error"]
    assert files["ok.py"]["status"] == "changed"
    assert_ok_migrated(tmp_path)
    assert (tmp_path / "out/deep.py").read_text() == DEEP  # copied unchanged


def test_recursion_error_in_name_resolution_is_the_files_error(tmp_path):
    repo = tree(tmp_path, {"dispatch.py": ELIF})
    done = migrate(repo, tmp_path, "--jobs", "1")
    assert done.returncode == 16, done.stderr
    assert "Traceback" not in done.stderr
    assert "NPU010" in results(tmp_path)["dispatch.py"]["error"]
    assert_ok_migrated(tmp_path)


def test_a_file_over_the_size_limit_is_not_read(tmp_path):
    big = "import torch\n" + "x = 1\n" * 400 + "y = x.cuda()\n"
    repo = tree(tmp_path, {"big.py": big})
    done = migrate(repo, tmp_path, "--max-file-size", "1000")
    assert done.returncode == 16, done.stderr
    assert "NPU007" in results(tmp_path)["big.py"]["error"]
    assert (tmp_path / "out/big.py").read_text() == big
    assert_ok_migrated(tmp_path)


def test_a_file_past_its_time_budget_is_stopped(tmp_path):
    huge = "import torch\nx = " + " + ".join(f"a{i}" for i in range(100_000)) + "\ny = x.cuda()\n"
    repo = tree(tmp_path, {"huge.py": huge})
    start = time.monotonic()
    done = migrate(repo, tmp_path, "--file-timeout", "1", "--jobs", "1")
    took = time.monotonic() - start
    assert done.returncode == 16, done.stderr
    assert "NPU008" in results(tmp_path)["huge.py"]["error"]
    assert_ok_migrated(tmp_path)
    assert took < 60, f"the 1 s budget (+5 s grace) took {took:.0f} s"


def test_odd_file_names_are_reported_and_the_patch_still_applies(tmp_path):
    repo = tree(tmp_path, {})
    (repo / "new\nline.py").write_text(OK)
    (repo / os.fsdecode(b"caf\xe9.py")).write_text(OK)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    done = migrate(repo, tmp_path)
    assert done.returncode == 16, done.stderr
    files = results(tmp_path)
    assert "NPU012" in files["new\\nline.py"]["error"] and "NPU012" in files["caf\\xe9.py"]["error"]
    assert (tmp_path / "out" / "new\nline.py").read_text() == OK  # copied unchanged under its own name
    assert "new" not in (tmp_path / "r/changes.patch").read_text()
    (tmp_path / "r/report.md").read_text(encoding="utf-8")  # valid UTF-8
    subprocess.run(["git", "apply", "--check", str(tmp_path / "r/changes.patch")], cwd=repo, check=True)


def test_unreadable_files_and_directories_are_reported_and_skipped(tmp_path):
    """As root nothing is unreadable, so the OS errors are injected where the tool reads."""
    repo = tree(tmp_path, {"locked.py": OK})
    (repo / "secret").mkdir()
    (repo / "secret/inner.py").write_text(OK)
    code = f"""
import builtins, errno, os, sys
real_open, real_scandir = os.open, os.scandir
def fake_open(path, *a, **k):
    if str(path).endswith("locked.py"):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))
    return real_open(path, *a, **k)
def fake_scandir(path=".", *a, **k):
    if str(path).endswith("secret"):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))
    return real_scandir(path, *a, **k)
os.open, os.scandir = fake_open, fake_scandir
from npu_migrate.migrate.cli import main
sys.argv = ["migrate", "run", {str(repo)!r}, "--out", {str(tmp_path / 'out')!r}, "--report-dir", {str(tmp_path / 'r')!r}]
main()
"""
    env = {**os.environ, "NPU_MIGRATE_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 16, done.stderr
    assert "Traceback" not in done.stderr
    files = results(tmp_path)
    assert "NPU005" in files["locked.py"]["error"] and "Permission denied" in files["locked.py"]["error"]
    assert "NPU014" in files["secret/"]["error"]
    assert (tmp_path / "out/locked.py").exists() is False  # could not be copied either: said so
    report = json.loads((tmp_path / "r/report.json").read_text())
    assert "locked.py" in {e["path"] for e in report["written"]["not_written"]}
    assert_ok_migrated(tmp_path)


def _children(pid: int) -> list:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def test_ctrl_c_stops_a_large_run_within_seconds(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    body = OK + "".join(f"\n\ndef f{i}(t):\n    return t.cuda().float() + {i}\n" for i in range(150))
    for i in range(600):
        (repo / f"m{i:03d}.py").write_text(body)
    env = {**os.environ, "NPU_MIGRATE_CACHE_DIR": str(tmp_path / "cache")}
    process = subprocess.Popen([sys.executable, "-m", "npu_migrate.migrate", "run", str(repo), "--out",
                                str(tmp_path / "out"), "--report-dir", str(tmp_path / "r"), "--jobs", "2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not _children(process.pid) and time.monotonic() < deadline:  # wait until the workers run
        time.sleep(0.2)
    time.sleep(1)
    assert process.poll() is None, "the run ended before it could be interrupted"
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    took = time.monotonic() - sent
    assert process.returncode == 130, stderr
    assert took <= 5, f"Ctrl-C took {took:.1f} s"
    assert "interrupted" in stderr and "Traceback" not in stderr
    leftovers = [p for p in tmp_path.rglob("*.tmp")]
    assert not leftovers, leftovers


def test_an_interrupt_while_the_results_come_back_stops_the_workers_before_run_returns(tmp_path, monkeypatch):
    """Ctrl-C between two results (in the loop that collects them, not inside the pool) kills the
    workers at once: they are not left running until the interrupted generator is collected."""
    import multiprocessing
    from contextlib import contextmanager

    from npu_migrate.migrate import runner
    from npu_migrate.opmap import load_table

    body = OK + "".join(f"\n\ndef f{i}(t):\n    return t.cuda().float() + {i}\n" for i in range(40))
    paths = []
    for i in range(12):
        (tmp_path / f"m{i:02d}.py").write_text(body)
        paths.append(f"m{i:02d}.py")

    @contextmanager
    def progress(total, enabled):
        def advance(n):
            raise KeyboardInterrupt
        yield advance

    monkeypatch.setattr(runner, "_progress", progress)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        runner.run(tmp_path, paths, load_table(), jobs=2, progress=True)
    assert interrupted.traceback  # the frames (and what they hold) are still alive here
    assert not multiprocessing.active_children()
