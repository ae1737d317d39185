"""The processes of a parity run: workers that run other people's models and may hang, spin, fork
or outlive their parent, kept on a leash.

- Each worker runs in a session and process group of its own (``start_new_session``), from a
  scratch working directory (relative writes of the model land there, never in a tree), with its
  output in a log file: a grandchild that keeps the output open cannot hold the verdict up, since
  nothing waits for end-of-file. When the worker exits, is stopped or times out, its whole group
  is killed (what it forked included).
- A worker says what it does in a progress file (``ready``, then ``start I`` / ``done I`` per run,
  with the run's result in ``<side>.<I>.pt``), so the parent knows which run is under way, stops
  the group when that run exceeds its time limit, and starts a new worker for the runs left.
- A reaper (``migrate.lifeline.reap``) knows every group and the temporary directory: if the
  parent dies (kill -9 included), it kills the groups and removes the directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Tuple

READY, START, DONE = "ready", "start", "done"
STARTUP_SECONDS = 300.0  # how long a worker may take to import torch and its emulation
OUTPUT_TAIL_LINES = 15


class Reaper:
    """The process that cleans up after this one if it dies; ``close()`` when the run ends well."""

    def __init__(self, tmp: Path) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "npu_migrate.migrate.lifeline"],
                                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                        start_new_session=True)
        self.say(f"path {tmp}")

    def say(self, line: str) -> None:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def close(self) -> None:
        self.say("done")
        self.process.stdin.close()
        self.process.wait()


class Worker:
    """One worker process of one side (``python -m npu_migrate.migrate.parity.worker REQUEST``)."""

    def __init__(self, side: str, tmp: Path, request: dict, reaper: Reaper, feeds: bool) -> None:
        self.side, self.tmp = side, tmp
        self.started = time.monotonic()
        self.progress_path = tmp / f"{side}.progress"
        self.progress_path.write_text("")
        self.log_path = tmp / f"{side}.log"
        scratch = tmp / f"{side}-cwd"
        scratch.mkdir(exist_ok=True)
        request_path = tmp / f"{side}.json"
        request_path.write_text(json.dumps({**request, "progress": str(self.progress_path), "tmp": str(tmp)}))
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "npu_migrate.migrate.parity.worker", str(request_path)], cwd=scratch,
                stdin=subprocess.PIPE if feeds else subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, text=True)
        reaper.say(f"group {self.process.pid}")

    def events(self) -> List[Tuple[str, Optional[int], float]]:
        """``(what, run, when)`` for every complete line of the progress file."""
        found = []
        text = self.progress_path.read_text()
        for line in text.splitlines(keepends=True):
            if not line.endswith("\n"):
                break  # being written
            parts = line.split()
            found.append((parts[0], int(parts[1]) if len(parts) > 2 else None, float(parts[-1])))
        return found

    def feed(self, line: str) -> None:
        try:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died: its exit is seen by the next poll

    def end_feed(self) -> None:
        try:
            self.process.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def stop(self) -> None:
        """Kill the worker's process group (everything it forked) and reap the worker."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass

    def output_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-OUTPUT_TAIL_LINES:])

    def fatal(self) -> Optional[str]:
        """The message of a worker that could not start its runs at all (the emulation failed)."""
        path = self.tmp / f"{self.side}.fatal"
        return path.read_text() if path.exists() else None


def progress_line(path: Path, what: str, run: Optional[int] = None) -> None:
    """Append one progress line (called in the worker)."""
    with open(path, "a") as handle:
        handle.write(f"{what} {'' if run is None else str(run) + ' '}{time.monotonic()}\n")
        handle.flush()


def exited(worker: Worker) -> str:
    code = worker.process.returncode
    how = f"was killed by signal {signal.Signals(-code).name}" if code is not None and code < 0 else \
        f"exited with code {code}"
    tail = worker.output_tail()
    return f"the worker process {how}" + (f":\n{tail}" if tail else "")
