"""Issue 25 item 4: one writing run per directory (the holder named, a dead holder's lock gone with
it), temporary names unique to a run, and no temporary file of a killed run left in the tree."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from npu_migrate.migrate.outputs.atomic import OutputDir
from npu_migrate.migrate.outputs.lock import LockedError, locked

HOLDER = """
import sys, time
from pathlib import Path
from npu_migrate.migrate.outputs.lock import locked
with locked([(Path(sys.argv[1]), "output directory")]):
    print("held", flush=True)
    time.sleep(600)
"""


def _hold(directory: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory), "--marker"], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_held_directory_is_refused_naming_the_holder_until_it_dies(tmp_path):
    out = tmp_path / "out"
    holder = _hold(out)
    try:
        with pytest.raises(LockedError) as refused:
            with locked([(out, "output directory")]):
                pass
        message = str(refused.value)
        assert f"the output directory {out} is in use by another npu-migrate run (pid {holder.pid}, started " in message
        assert "--marker" in message  # its command line
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(30)
    with locked([(out, "output directory")]):  # the kernel dropped the dead holder's lock
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and not any(out.iterdir())  # nothing written


def test_a_lock_is_released_for_the_next_run_and_not_held_by_forked_children(tmp_path):
    with locked([(tmp_path, "report directory")]):
        child = os.fork()
        if child == 0:  # a forked worker closes its copy: it cannot keep the run's lock alive
            try:
                with locked([(tmp_path, "report directory")]):
                    os._exit(3)
            except LockedError:
                os._exit(4)
        _, status = os.waitpid(child, 0)
        assert os.WEXITSTATUS(status) == 4  # the parent still holds it
    with locked([(tmp_path, "report directory")]):
        pass


def test_temporary_names_are_unique_to_each_writer(tmp_path):
    with OutputDir(tmp_path / "a", durable=False) as first, OutputDir(tmp_path / "a", durable=False) as second:
        assert first.temp_name("m.py") != second.temp_name("m.py")
        assert str(os.getpid()) in first.temp_name("m.py")
        first.write("m.py", b"one\n")
        second.write("m.py", b"two\n")
    assert (tmp_path / "a" / "m.py").read_bytes() == b"two\n"
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["m.py"]


def test_what_a_killed_run_left_in_the_staging_directory_is_cleared(tmp_path):
    from npu_migrate.migrate.outputs.tree import write_tree
    from npu_migrate.migrate.runner import RunResult

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    staging = tmp_path / "reports" / "tree-staging"
    staging.mkdir(parents=True)
    (staging / "123-abcd-0000.tmp").write_text("half a file of a killed run")
    outcome = write_tree(RunResult(repo, [], copied=["a.txt"]), [], tmp_path / "out", staging=staging)
    assert outcome.complete and outcome.written == ["a.txt"]
    assert not staging.exists()
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["a.txt"]
