"""Worker processes that outlive the files they choke on.

``supervise`` runs ``work(item)`` for every item in forked worker processes and yields
``(item, result)`` as results arrive. Unlike a ``ProcessPoolExecutor`` (where one segfault breaks
the whole pool), each worker has its own pipe and answers item by item, so the parent always knows
which item a worker is on. When a worker dies (a crash in native code, the OOM killer) or stays
silent on one item past ``hard_seconds`` of CPU time (or ``wall_seconds`` of wall-clock time), the
parent kills it, yields ``lost(item, why)`` for that item, puts the rest of its chunk back at the
front of the queue and starts a new worker.

Chunks go out on demand (a worker gets the next one when it has answered the last), so uneven
files balance themselves and nothing queues up inside a worker: on Ctrl-C the parent kills the
workers at once (they ignore SIGINT, so the terminal's signal reaches only the parent) and
``KeyboardInterrupt`` propagates within a fraction of a second, whatever the size of the tree.
Workers are forked: they inherit the parent's loaded modules and state (no imports to repeat,
nothing to pickle but the items and the results). They end with the parent however it ends
(``kill -9`` included, ``migrate.lifeline``): each closes its copies of the parent's pipe ends, so
an idle worker reads end-of-file, and on Linux the kernel kills a busy one when the parent dies.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Deque, Iterator, List, Optional, Sequence, Tuple

from .lifeline import close_inherited, die_with_parent
from .limits import cpu_seconds

POLL_SECONDS = 0.5  # the longest the parent sleeps between checks of silent workers


@dataclass(eq=False)
class _Worker:
    process: Any
    conn: Connection
    chunk: List[Any] = field(default_factory=list)
    answered: int = 0
    since: float = 0.0  # when the current item started (the last answer or the hand-out)
    cpu_since: Optional[float] = None  # the worker's CPU seconds then (None: unknown)

    def started(self) -> None:
        self.since, self.cpu_since = time.monotonic(), cpu_seconds(self.process.pid)

    def overdue(self, hard_seconds: float, wall_seconds: float) -> Optional[str]:
        """Why the worker is to be stopped on its current item, or None."""
        if hard_seconds and self.cpu_since is not None:
            used = cpu_seconds(self.process.pid)
            if used is not None and used - self.cpu_since > hard_seconds:
                return f"no answer after {hard_seconds:.0f} s of CPU time (the worker was stopped)"
        if wall_seconds and time.monotonic() - self.since > wall_seconds:
            return f"no answer after {wall_seconds:.0f} s (the worker was stopped)"
        return None

    @property
    def busy(self) -> bool:
        return self.answered < len(self.chunk)

    @property
    def current(self) -> Any:
        return self.chunk[self.answered]


def _serve(conn: Connection, setup: Callable[[], None], work: Callable[[Any], Any], parent: int,
           parent_ends: List[Connection]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills the workers
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler (a KeyboardInterrupt that code may swallow)
    close_inherited(parent_ends)  # else this worker would hold its own pipe open after the parent died
    die_with_parent(parent)
    setup()
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        for item in chunk:
            try:
                conn.send(work(item))
            except OSError:  # the parent is gone
                return


def death_reason(exitcode: Optional[int]) -> str:
    """'signal SIGSEGV' / 'exit status 3': how a worker process ended."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit status {exitcode}"


def _chunks(items: Sequence[Any], jobs: int) -> Deque[List[Any]]:
    """Small chunks (about 16 per process, at most 8 items): balance and prompt cancellation."""
    size = max(1, min(8, len(items) // (jobs * 16) or 1))
    return deque(list(items[i:i + size]) for i in range(0, len(items), size))


def supervise(items: Sequence[Any], work: Callable[[Any], Any], lost: Callable[[Any, str], Any], *, jobs: int,
              setup: Callable[[], None] = lambda: None, hard_seconds: float = 0.0,
              wall_seconds: float = 0.0) -> Iterator[Tuple[Any, Any]]:
    """Yield ``(item, work(item))`` for every item, computed in ``jobs`` forked workers.

    ``setup()`` runs once in each worker before its first item. An item whose worker died, or used
    more than ``hard_seconds`` of CPU time or ``wall_seconds`` of wall-clock time on it (0: no
    limit), yields ``(item, lost(item, why))``.
    """
    context = multiprocessing.get_context("fork")
    queue = _chunks(items, max(1, jobs))
    workers: List[_Worker] = []
    parent_ends: List[Connection] = []  # every pipe end of this process: a new worker closes its copies

    def start() -> _Worker:
        ours, theirs = context.Pipe(duplex=True)
        parent_ends[:] = [c for c in parent_ends if not c.closed] + [ours]
        process = context.Process(target=_serve, args=(theirs, setup, work, os.getpid(), parent_ends), daemon=True)
        process.start()
        theirs.close()
        return _Worker(process, ours)

    try:
        for _ in range(min(max(1, jobs), len(queue))):
            workers.append(start())  # one at a time: an interrupt between two starts still stops the first
        while True:
            for worker in workers:
                if not worker.busy and queue:
                    worker.chunk, worker.answered = queue.popleft(), 0
                    worker.started()
                    worker.conn.send(worker.chunk)
            busy = [w for w in workers if w.busy]
            if not busy:
                return
            timeout = POLL_SECONDS
            ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout))
            for worker in busy:
                failure = None
                if worker.conn in ready or worker.process.sentinel in ready:
                    try:
                        while worker.busy and worker.conn.poll():
                            result = worker.conn.recv()
                            yield worker.current, result
                            worker.answered += 1
                            worker.started()
                    except (EOFError, OSError):
                        pass
                    if worker.busy and not worker.process.is_alive():
                        worker.process.join()
                        failure = f"the worker process died while migrating it ({death_reason(worker.process.exitcode)})"
                if failure is None and worker.busy:
                    failure = worker.overdue(hard_seconds, wall_seconds)
                if failure is not None:
                    item, rest = worker.current, worker.chunk[worker.answered + 1:]
                    _stop(worker)
                    if rest:
                        queue.appendleft(rest)
                    yield item, lost(item, failure)
                    workers[workers.index(worker)] = start()
    finally:
        for worker in workers:
            _stop(worker, gently=not worker.busy)


def _stop(worker: _Worker, gently: bool = False) -> None:
    """End a worker: an idle one is told to finish, any other is killed at once."""
    if gently and worker.process.is_alive():
        try:
            worker.conn.send(None)
        except OSError:
            pass
        worker.process.join(1.0)
    if worker.process.is_alive():
        try:
            os.kill(worker.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        worker.process.join()
    worker.conn.close()
