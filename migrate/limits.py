"""Per-file limits: how large a file may be and how long its migration may take.

A pathological file (a 50 MB generated table, a 100,000-term expression) must not end the run or
hold it for minutes. Each file gets a size limit, checked from ``fstat`` before it is read, and a
time budget in CPU seconds of the worker (so a machine loaded by other work does not push
ordinary files over it), enforced twice: in the worker by a CPU-time alarm (``ITIMER_PROF``) that
raises ``FileTimeout`` into the Python code (rules catch ``Exception``; this is a
``BaseException`` so it reaches the runner), and by the supervising parent (``migrate.pool``),
which kills and replaces a worker that stays in native code past the budget plus a grace period
(its CPU time read from ``/proc``; where that is missing, or when a worker burns no CPU at all, a
wall-clock limit of ``WALL_FACTOR`` times the budget applies). The defaults are far above what
real model code needs (the largest file of transformers/models is under 300 kB and migrates in a
few CPU seconds).
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional

DEFAULT_MAX_BYTES = 2 * 1024 * 1024
DEFAULT_MAX_SECONDS = 60.0
GRACE_SECONDS = 5.0  # how long past its budget a worker may stay silent before the parent kills it
WALL_FACTOR = 10  # a worker silent for this many budgets of wall-clock time is stopped whatever its CPU


@dataclass(frozen=True)
class Limits:
    max_bytes: int = DEFAULT_MAX_BYTES
    max_seconds: float = DEFAULT_MAX_SECONDS

    @property
    def hard_seconds(self) -> float:
        """CPU seconds after which the parent gives up on a worker that does not answer."""
        return self.max_seconds + GRACE_SECONDS

    @property
    def wall_seconds(self) -> float:
        """Wall-clock seconds after which a silent worker is stopped whatever its CPU time."""
        return self.max_seconds * WALL_FACTOR + GRACE_SECONDS


class FileTimeout(BaseException):
    """The file's time budget ran out (raised by the alarm inside the migration)."""


def _raise_timeout(signum, frame):  # noqa: ARG001  (signal handler signature)
    raise FileTimeout()


@contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Raise ``FileTimeout`` once this process has used ``seconds`` more CPU time (main thread
    only; elsewhere a no-op)."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGPROF, _raise_timeout)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def cpu_seconds(pid: int) -> Optional[float]:
    """User + system CPU seconds of process ``pid`` so far (from ``/proc``), or None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
