"""Child processes that end with the process that started them, however it ends.

A forked worker that waits on a pipe sees its parent die only when every copy of the parent's end
of that pipe is closed; the copies it inherited itself must therefore be closed first thing
(``close_inherited``). A worker busy in native code reads no pipe at all: on Linux the kernel
sends it a signal when its parent dies (``prctl(PR_SET_PDEATHSIG)``, ``die_with_parent``); a parent
that died before the call is caught by comparing the parent's pid. Elsewhere the pipe is the only
lifeline, and a busy worker ends at its next answer (the write fails).

Processes that run other people's code (the parity workers) get a reaper instead (``reap``): a
small idle process that kills their process groups and removes their temporary directory when the
parent dies, however busy or stuck the workers are.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from contextlib import contextmanager, suppress
from typing import Iterable, Iterator, List

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent ends; exit now if the parent
    (``parent_pid``, read before the fork) is already gone. Returns whether the platform has it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent_pid:  # the parent died between the fork and the call
        os._exit(1)
    return armed


def close_inherited(connections: Iterable) -> None:
    """Close this child's copies of the parent's ends of the pipes (``multiprocessing`` connections
    or file descriptors)."""
    for connection in connections:
        with suppress(OSError, AttributeError, ValueError):
            if isinstance(connection, int):
                os.close(connection)
            else:
                connection.close()


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises ``KeyboardInterrupt`` inside the block, so a terminated command stops the way
    Ctrl-C stops it (its workers killed, what it wrote recorded, its locks dropped); outside the
    main thread a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- the reaper: what a parent that dies leaves behind is cleaned up --------------------------------------
def reap(lines: Iterable[str]) -> None:
    """Read ``group PGID`` and ``path DIR`` lines until end of input; unless the last line was
    ``done``, kill every process group named and remove every directory named. Run as
    ``python -m npu_migrate.migrate.lifeline`` with its standard input a pipe whose only writer is
    the parent: end-of-file without ``done`` means the parent died (however: kill -9 included)."""
    import shutil

    groups: List[int] = []
    paths: List[str] = []
    done = False
    for line in lines:
        word, _, value = line.rstrip("\n").partition(" ")
        done = word == "done"
        if word == "group":
            groups.append(int(value))
        elif word == "path":
            paths.append(value)
    if done:
        return
    for group in groups:
        with suppress(OSError):
            os.killpg(group, signal.SIGKILL)
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and tells this process
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    reap(sys.stdin)
