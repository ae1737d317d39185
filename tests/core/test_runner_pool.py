"""The supervised worker pool: a dying or silent worker costs one item, never the run or the rest."""

import faulthandler
import os
import signal
import time

import pytest

from npu_migrate.migrate.pool import supervise


def _work(item):
    if item == "segfault":
        faulthandler.disable()  # pytest's faulthandler would print the crash's stack dump into the test output
        os.kill(os.getpid(), signal.SIGSEGV)
    if item == "exit":
        os._exit(3)
    if item == "hang":
        time.sleep(600)
    if item == "spin":
        while True:
            pass
    return item.upper()


def _lost(item, why):
    return f"LOST {item}: {why}"


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
def test_dead_and_silent_workers_cost_one_item_each(jobs):
    items = ["a", "segfault", "b", "exit", "c", "hang", "d", "spin"] + [f"x{i}" for i in range(30)]
    start = time.monotonic()
    done = dict(supervise(items, _work, _lost, jobs=jobs, hard_seconds=1, wall_seconds=8))
    assert time.monotonic() - start < 60
    assert set(done) == set(items)
    assert done["segfault"] == "LOST segfault: the worker process died while migrating it (signal SIGSEGV)"
    assert done["exit"] == "LOST exit: the worker process died while migrating it (exit status 3)"
    assert done["hang"].startswith("LOST hang: no answer after 8 s")  # sleeping: no CPU used, the wall limit
    assert done["spin"].startswith("LOST spin: no answer after 1 s of CPU time")
    assert all(done[i] == i.upper() for i in items if i not in ("segfault", "exit", "hang", "spin"))


def test_closing_early_kills_the_workers():
    results = supervise([f"x{i}" for i in range(100)] + ["hang"] * 4, _work, _lost, jobs=2)
    next(results)
    start = time.monotonic()
    results.close()  # what Ctrl-C in the consumer does
    assert time.monotonic() - start < 5


# -- issue 25 item 2: workers end with their parent -------------------------------------------------
PARENT = """
import sys, time
from npu_migrate.migrate import pool
if sys.argv[1] == "pipe-only":
    pool.die_with_parent = lambda parent: False  # only the closed pipe ends tell the idle worker
def work(item):
    if item == "busy":
        time.sleep(600)
    return item
for item, result in pool.supervise(["busy", "quick"], work, lambda item, why: why, jobs=2):
    print(result, flush=True)
"""


def _children(pid):
    from pathlib import Path

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


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads processes from /proc")
@pytest.mark.parametrize("mode", ["pipe-only", "parent-death-signal"])
def test_workers_end_when_their_parent_is_killed(mode):
    """kill -9 of the parent: the idle worker reads end-of-file on its pipe (no copy of the parent's
    end is left open in any worker); the busy one (asleep in its item) is killed by the kernel."""
    import subprocess
    import sys

    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE, text=True)
    workers = []
    try:
        assert parent.stdout.readline().strip() == "quick"  # one worker idle, the other busy
        workers = _children(parent.pid)
        assert len(workers) == 2
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(30)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and sum(map(_alive, workers)) > (1 if mode == "pipe-only" else 0):
            time.sleep(0.1)
        left = [p for p in workers if _alive(p)]
        assert len(left) == (1 if mode == "pipe-only" else 0), left  # pipe-only: the busy one sleeps on
    finally:
        if parent.poll() is None:
            os.kill(parent.pid, signal.SIGKILL)
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
