"""One writing run at a time per directory: ``migrate run`` locks its output tree and its report
directory (and PATH when it writes in place) before it writes anything.

A lock is a kernel ``flock`` on the directory itself, through an open descriptor of it: nothing is
written (no lock file in the migrated tree, none left behind), and the kernel drops the lock when
its process ends, however it ends (``kill -9`` included), so a dead run never holds a directory.
Forked worker processes close their copies of the descriptor (``os.register_at_fork``), so only
the run itself holds it. A second run is refused with a message naming the holder: its pid (from
``/proc/locks``), its start time and its command line (from ``/proc/<pid>``); where those are not
readable the message says so. A holder that has just died (its workers still closing) is waited
for briefly.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from contextlib import ExitStack, contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Iterator, Optional, Sequence, Set

DEAD_HOLDER_WAIT_SECONDS = 2.0  # a lock whose named holder is gone is retried this long
_held: Set[int] = set()  # descriptors of the locks this process holds


class LockedError(Exception):
    """Another process holds the lock of a directory this run would write."""


def _close_in_child() -> None:
    for fd in list(_held):
        with suppress(OSError):
            os.close(fd)
    _held.clear()


os.register_at_fork(after_in_child=_close_in_child)


def _holder_pid(fd: int) -> Optional[int]:
    """The pid that ``/proc/locks`` names for the lock on ``fd``'s inode, if any."""
    info = os.fstat(fd)
    wanted = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5373987 0 EOF" (a waiter's line has "->" after the index)
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted and fields[4].isdigit():
            return int(fields[4])
    return None


def _started(pid: int) -> Optional[str]:
    """The local start time of process ``pid`` (from ``/proc``), or None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            ticks = int(handle.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/stat", "rb") as handle:
            boot = next(int(line.split()[1]) for line in handle if line.startswith(b"btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return datetime.fromtimestamp(boot + ticks / os.sysconf("SC_CLK_TCK")).isoformat(sep=" ", timespec="seconds")


def _command(pid: int) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            parts = handle.read().split(b"\0")
    except OSError:
        return None
    return " ".join(os.fsdecode(p) for p in parts if p) or None


def holder(fd: int) -> Optional[str]:
    """'pid 1234, started 2026-12-01 10:00:00: migrate run repo' for the lock on ``fd``; None when the
    holder cannot be named or is gone."""
    pid = _holder_pid(fd)
    if pid is None or not os.path.exists(f"/proc/{pid}"):
        return None
    started, command = _started(pid), _command(pid)
    return f"pid {pid}" + (f", started {started}" if started else "") + (f": {command}" if command else "")


def _lock(directory: Path, what: str) -> int:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    deadline = time.monotonic() + DEAD_HOLDER_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
            who = holder(fd)
            if who is None and time.monotonic() < deadline:
                time.sleep(0.1)  # the holder is gone or going: its lock is about to be dropped
                continue
            os.close(fd)
            raise LockedError(f"the {what} {directory} is in use by another npu-migrate run "
                              f"({who or 'its process could not be named'}); wait for it to finish, "
                              "or choose another directory") from None
        _held.add(fd)
        return fd


@contextmanager
def locked(directories: Sequence[tuple]) -> Iterator[None]:
    """Hold the lock of each ``(directory, what)`` (created when missing) for the ``with`` block;
    ``LockedError`` when another process holds one (the locks taken so far are released)."""
    with ExitStack() as stack:
        for directory, what in sorted(directories, key=lambda item: str(item[0])):
            Path(directory).mkdir(parents=True, exist_ok=True)
            stack.callback(_release, _lock(Path(directory), what))
        yield


def _release(fd: int) -> None:
    _held.discard(fd)
    with suppress(OSError):
        os.close(fd)  # closing the last descriptor drops the flock
