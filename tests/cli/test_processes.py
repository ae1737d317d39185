"""Issue 25 items 2-4 with real processes: workers end with a killed or terminated run, an in-place
journal belongs to the latest run, and a second run into the same directories is refused while
the first holds them. Every process killed here is one this test started, killed by its pid."""

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from npu_migrate.migrate import exitcodes
from tests.cli.conftest import git, git_init, write_tree

SLOW_RUN = Path(__file__).with_name("slow_run.py")
ROOT = Path(__file__).resolve().parents[2]
CUDA = "import torch\n\nx = torch.zeros(3).cuda()\n"
SLOW = "import torch\n\nSLOW_ME = 1\nx = torch.zeros(3).cuda()\n"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")]


def _children(pid: int):
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != b"Z":
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


def _gone(pids, seconds=15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def _start(cwd: Path, *args, slow_seconds="600"):
    env = dict(os.environ, SLOW_SECONDS=slow_seconds, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, str(SLOW_RUN), "run", *map(str, args)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for_slow(process, seconds=300.0) -> int:
    """The pid of the worker that is busy on the slow file (from the run's stderr)."""
    selector = selectors.DefaultSelector()
    selector.register(process.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + seconds
    seen = b""
    while time.monotonic() < deadline:
        if selector.select(timeout=1.0):
            line = process.stderr.readline()
            seen += line
            if line.startswith(b"SLOW "):
                return int(line.split()[1])
            if not line and process.poll() is not None:
                break
    process.kill()
    raise AssertionError(f"the run never reached the slow file: {seen.decode(errors='replace')}")


def _kill(process) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
    process.wait(30)


@pytest.fixture
def repo(tmp_path):
    return write_tree(tmp_path / "repo", {"slow.py": SLOW, **{f"m{i}.py": CUDA for i in range(6)}})


def test_kill_9_of_the_run_ends_its_workers(repo, tmp_path):
    run = _start(tmp_path, repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r", "--no-cache", "--jobs", "2")
    busy = _wait_for_slow(run)
    workers = _children(run.pid)
    assert busy in workers and len(workers) == 2
    try:
        os.kill(run.pid, signal.SIGKILL)
        run.wait(30)
        assert _gone(workers), f"workers {[p for p in workers if _alive(p)]} outlived their parent"
    finally:
        for pid in workers:  # only if the test failed: never leave them behind
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_sigterm_stops_the_run_like_ctrl_c(repo, tmp_path):
    run = _start(tmp_path, repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r", "--no-cache", "--jobs", "2")
    _wait_for_slow(run)
    workers = _children(run.pid)
    try:
        os.kill(run.pid, signal.SIGTERM)
        _, stderr = run.communicate(timeout=60)
        assert run.returncode == exitcodes.INTERRUPTED
        assert b"interrupted" in stderr and b"Traceback" not in stderr
        assert _gone(workers)
        assert not any((tmp_path / "out").rglob("*.py"))  # stopped before writing
    finally:
        _kill(run)
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_second_run_into_the_same_directories_is_refused_and_a_dead_holder_is_taken_over(repo, tmp_path):
    out, reports = tmp_path / "out", tmp_path / "r"
    first = _start(tmp_path, repo, "--out", out, "--report-dir", reports, "--no-cache", "--jobs", "1")
    try:
        _wait_for_slow(first)
        second = _start(tmp_path, repo, "--out", out, "--report-dir", reports, "--no-cache", "--no-fused",
                        slow_seconds="0")
        _, stderr = second.communicate(timeout=120)
        text = stderr.decode()
        assert second.returncode == exitcodes.CONFIG_ERROR, text
        assert "in use by another npu-migrate run" in text and f"pid {first.pid}, started" in text
        assert "slow_run.py run" in text  # the holder's command line
        assert not (reports / "report.json").exists() and not any(out.rglob("*.py"))
    finally:
        workers = _children(first.pid)
        _kill(first)
        assert _gone(workers)
    third = _start(tmp_path, repo, "--out", out, "--report-dir", reports, "--no-cache", slow_seconds="0")
    _, stderr = third.communicate(timeout=120)
    assert third.returncode == 0, stderr.decode()
    assert (out / "slow.py").read_text() == SLOW.replace("import torch\n", "import torch\nimport torch_npu  # noqa: F401\n") \
        .replace(".cuda()", ".npu()")
    assert not [p for p in out.rglob("*") if "tmp" in p.name]  # no temporary file of the killed run


def test_resume_and_revert_act_only_on_the_run_of_the_journal(tmp_path):
    """A finished in-place run, then a second one killed during its analysis: --resume must not say
    'finished' and --revert must not undo the first run."""
    repo = write_tree(tmp_path / "repo", {"a.py": CUDA})
    git_init(repo)
    reports = tmp_path / "r"
    first = _start(tmp_path, repo, "--in-place", "--report-dir", reports, "--no-cache", slow_seconds="0")
    _, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr.decode()
    migrated_a = (repo / "a.py").read_text()
    assert ".npu()" in migrated_a
    write_tree(repo, {"slow.py": SLOW})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "migrated a.py; new slow.py")
    second = _start(tmp_path, repo, "--in-place", "--report-dir", reports, "--no-cache")
    try:
        _wait_for_slow(second)
        workers = _children(second.pid)
    finally:
        _kill(second)
    assert _gone(workers)
    for option, verb in (("--resume", "finish"), ("--revert", "undo")):
        done = _start(tmp_path, repo, "--in-place", option, "--report-dir", reports, slow_seconds="0")
        _, stderr = done.communicate(timeout=120)
        text = " ".join(stderr.decode().split())
        assert done.returncode == exitcodes.CONFIG_ERROR, text
        assert f"nothing to {verb}" in text and "stopped before it wrote any file" in text
        assert f"pid {second.pid}" in text
    assert (repo / "a.py").read_text() == migrated_a  # the first run is not undone
    assert (repo / "slow.py").read_text() == SLOW
    again = _start(tmp_path, repo, "--in-place", "--report-dir", reports, "--no-cache", slow_seconds="0")
    _, stderr = again.communicate(timeout=120)
    assert again.returncode == 0, stderr.decode()
    assert ".npu()" in (repo / "slow.py").read_text()
