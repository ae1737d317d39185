"""Per-file limits: how large a file may be and how long its migration may take.

A pathological file (a 50 MB generated table, a 100,000-term expression) must not end the run or
hold it for minutes. Each file gets a size limit, checked from ``fstat`` before it is read, and a
time budget, enforced twice: in the worker by an alarm that raises ``FileTimeout`` into the
Python code (rules catch ``Exception``; this is a ``BaseException`` so it reaches the runner), and
by the supervising parent (``migrate.pool``), which kills and replaces a worker that stays in
native code past the budget plus a grace period. The defaults are far above what real model code
needs (the largest file of transformers/models is under 300 kB and migrates in a few seconds).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

DEFAULT_MAX_BYTES = 2 * 1024 * 1024
DEFAULT_MAX_SECONDS = 60.0
GRACE_SECONDS = 5.0  # how long past its budget a worker may stay silent before the parent kills it


@dataclass(frozen=True)
class Limits:
    max_bytes: int = DEFAULT_MAX_BYTES
    max_seconds: float = DEFAULT_MAX_SECONDS

    @property
    def hard_seconds(self) -> float:
        """When the parent gives up on a worker that does not answer."""
        return self.max_seconds + GRACE_SECONDS


class FileTimeout(BaseException):
    """The file's time budget ran out (raised by the alarm inside the migration)."""


def _raise_timeout(signum, frame):  # noqa: ARG001  (signal handler signature)
    raise FileTimeout()


@contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Raise ``FileTimeout`` in this thread after ``seconds`` (main thread only; elsewhere a no-op)."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGALRM, _raise_timeout)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
