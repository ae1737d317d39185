"""Issue 25 item 7: a parity run with a time limit, workers on a leash. An endless factory is stopped
with everything it started, the other cases still run; killing the parity process leaves no worker
and no temporary directory; a grandchild holding the output does not hold the verdict up; the
model runs from a scratch directory. Every process killed here is one this test started."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from npu_migrate.migrate import exitcodes

ROOT = Path(__file__).resolve().parents[2]
MODEL = '''import os, subprocess, sys, time
import torch


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


def ok():
    return Tiny()


def endless():
    {pid_file}
    # a child in the worker's process group, then spin: the whole group must be stopped
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)  # {token}"])
    while True:
        pass


def forks_a_lingering_child():
    # a grandchild that keeps the worker's output open for ten minutes
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)  # {token}"], stdout=sys.stdout,
                     stderr=sys.stderr)
    return Tiny()


def writes_relative():
    with open("written-by-the-model.txt", "w") as handle:
        handle.write(os.getcwd())
    return Tiny()
'''
INPUTS = "inputs: {x: {shape: [2, 4]}}"


def _trees(tmp_path: Path, cases: str, pid_file: str = "pass") -> Path:
    for tree in ("tree", "tree-npu"):
        (tmp_path / tree).mkdir()
        model = MODEL.replace("{pid_file}", pid_file).replace("{token}", _token(tmp_path))
        (tmp_path / tree / "model.py").write_text(model)
    spec = tmp_path / "tree" / "parity.yaml"
    spec.write_text("cases:\n" + cases)
    return spec


def _parity(tmp_path: Path, spec: Path, *args: str, **popen):
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), PYTHONPATH=str(ROOT))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    command = [sys.executable, "-m", "npu_migrate.migrate", "parity", "--spec", str(spec),
               "--json", str(tmp_path / "parity.json"), *args]
    return subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def _our_temporary_directories(tmp_path: Path) -> list:
    """The run's temporary directories left in its TMPDIR (torch keeps caches of its own there)."""
    return sorted((tmp_path / "tmp").glob("migrate-parity-*"))


def _token(tmp_path: Path) -> str:
    """What the command lines of this test's model processes (and no one else's) carry."""
    return f"npu-migrate-parity-test-{tmp_path.name}-{os.getpid()}"


def _started_by(token: str) -> set:
    """Every process (not a zombie) whose command line carries ``token``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if state != b"Z" and token.encode() in command:
                found.add(int(entry.name))
    return found


@pytest.fixture
def no_leftovers(tmp_path):
    """The processes this test's models started (their command lines carry the test's token) are
    gone afterwards: killed by the run, or else (the test failed) by this fixture, by pid."""
    token = _token(tmp_path)
    yield
    deadline = time.monotonic() + 15
    left = _started_by(token)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _started_by(token)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"


pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc"),
              pytest.mark.usefixtures("no_leftovers")]


def test_an_endless_factory_times_out_and_the_other_cases_still_run(tmp_path):
    spec = _trees(tmp_path, f"  - {{name: endless, factory: 'model.py:endless', {INPUTS}, timeout: 3}}\n"
                            f"  - {{name: fine, factory: 'model.py:ok', {INPUTS}}}\n"
                            f"  - {{name: cwd, factory: 'model.py:writes_relative', {INPUTS}}}\n")
    run = _parity(tmp_path, spec, "--timeout", "120")
    _, stderr = run.communicate(timeout=600)
    assert run.returncode == exitcodes.PARITY_FAILED, stderr.decode()
    cases = {c["name"]: c for c in json.loads((tmp_path / "parity.json").read_text())["cases"]}
    assert cases["endless"]["verdict"] == "timed out"
    assert "within its time limit of 3 s" in " ".join(cases["endless"]["errors"])
    assert cases["fine"]["verdict"] == "passed" and cases["cwd"]["verdict"] == "passed"
    # the model wrote into its scratch working directory, never into a tree; no temporary directory is left
    assert not list(tmp_path.glob("tree*/written-by-the-model.txt"))
    assert _our_temporary_directories(tmp_path) == []


def test_the_command_line_timeout_applies_to_cases_without_one(tmp_path):
    spec = _trees(tmp_path, f"  - {{name: endless, factory: 'model.py:endless', {INPUTS}}}\n")
    run = _parity(tmp_path, spec, "--timeout", "3")
    _, stderr = run.communicate(timeout=600)
    assert run.returncode == exitcodes.PARITY_FAILED, stderr.decode()
    (case,) = json.loads((tmp_path / "parity.json").read_text())["cases"]
    assert case["verdict"] == "timed out" and "time limit of 3 s" in " ".join(case["errors"])


def test_kill_9_of_the_parity_process_stops_its_workers_and_removes_the_temporary_directory(tmp_path):
    marker = tmp_path / "factory-started"
    spec = _trees(tmp_path, f"  - {{name: endless, factory: 'model.py:endless', {INPUTS}}}\n",
                  pid_file=f"open({str(marker)!r}, 'w').write(str(os.getpid()))")
    run = _parity(tmp_path, spec)
    deadline = time.monotonic() + 300
    while not marker.exists() and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.2)
    assert marker.exists() and marker.read_text(), run.communicate(timeout=10)
    worker = int(marker.read_text())
    os.kill(run.pid, signal.SIGKILL)
    run.wait(30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (Path(f"/proc/{worker}").exists() or _our_temporary_directories(tmp_path)):
        time.sleep(0.2)
    alive = Path(f"/proc/{worker}/stat").exists() and \
        Path(f"/proc/{worker}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z"
    if alive:
        os.kill(worker, signal.SIGKILL)
    assert not alive, "the spinning worker outlived the parity process"
    assert _our_temporary_directories(tmp_path) == []


def test_a_grandchild_holding_the_output_does_not_hold_up_the_verdict(tmp_path):
    spec = _trees(tmp_path, f"  - {{name: forks, factory: 'model.py:forks_a_lingering_child', {INPUTS}}}\n")
    run = _parity(tmp_path, spec)
    _, stderr = run.communicate(timeout=300)  # the grandchild sleeps 600 s: waiting for it would fail here
    assert run.returncode == 0, stderr.decode()
    (case,) = json.loads((tmp_path / "parity.json").read_text())["cases"]
    assert case["verdict"] == "passed"
