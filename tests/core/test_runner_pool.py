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
