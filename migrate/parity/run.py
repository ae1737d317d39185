"""Running a parity spec: worker processes per side (``parity.process``), then the comparison here.

The original side runs every run (a case in one dtype or AMP mode) in turn; each run it finishes
is handed to the migrated side, which runs it against the original's weights and inputs, so both
sides work at once. Every run has a time limit: the case's ``timeout:`` in the spec, else
``--timeout``, else ``DEFAULT_TIMEOUT``. A run that exceeds it is stopped with its worker's whole
process group and becomes a ``timed out`` result; a run whose worker died becomes an error; in
both cases a new worker takes the runs that are left.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

from .compare import compare_case
from .failures import TIMED_OUT
from .process import DONE, READY, START, STARTUP_SECONDS, Reaper, Worker, exited
from .report import ParityReport
from .sites import rewritten_sites
from .spec import SpecError, load_spec
from .worker import spec_runs

DEFAULT_TIMEOUT = 300.0  # seconds one run of a case may take when neither the spec nor --timeout says
POLL_SECONDS = 0.1


def default_migrated(original: Path) -> Path:
    """The migrated tree beside the original: ``<dir>-npu``."""
    return original.with_name(original.name + "-npu")


class _Side:
    """One side's runs, their results, and the worker running them (restarted after a stop)."""

    def __init__(self, side: str, request: dict, limits: List[float], tmp: Path, reaper: Reaper) -> None:
        self.side, self.request, self.limits, self.tmp, self.reaper = side, request, limits, tmp, reaper
        self.fed = side == "migrated"  # its runs come one by one, as the original side finishes them
        self.pending = list(range(len(limits)))
        self.results: Dict[int, dict] = {}
        self.inputs: Dict[int, str] = {}  # fed side: run -> the original's result file
        self.worker: Optional[Worker] = None
        self.sent: List[int] = []  # fed side: the runs given to the current worker

    def settle(self, run: int, result: dict) -> None:
        if run in self.pending:
            self.results[run] = result
            self.pending.remove(run)

    def poll(self) -> None:
        """Start a worker when there is work, feed it, collect results, stop what overran."""
        if self.worker is None:
            if not self.pending or (self.fed and not any(run in self.inputs for run in self.pending)):
                return
            self.worker = Worker(self.side, self.tmp, {**self.request, "runs": [] if self.fed else self.pending},
                                 self.reaper, self.fed)
            self.sent = []
        worker = self.worker
        if self.fed:
            for run in self.pending:
                if run in self.inputs and run not in self.sent:
                    worker.feed(f"{run} {self.inputs[run]}")
                    self.sent.append(run)
            if all(run in self.sent for run in self.pending):
                worker.end_feed()
        exited_code = worker.process.poll()
        events = worker.events()
        started = {run: when for what, run, when in events if what == START}
        done = [run for what, run, _ in events if what == DONE]
        for run in done:
            self.settle(run, torch.load(self.tmp / f"{self.side}.{run}.pt", weights_only=True))
        current = next((run for run in started if run not in done), None)
        now = time.monotonic()
        if current is not None and now - started[current] > self.limits[current]:
            self._stop({current: _timed_out(self.limits[current])})
        elif current is None and not any(what == READY for what, _, _ in events) and \
                now - worker.started > STARTUP_SECONDS:
            why = f"the worker process did not start within {STARTUP_SECONDS:g} s; it was stopped"
            self._stop({run: {"error": why} for run in self._given()})
        elif exited_code is not None:
            fatal = worker.fatal()  # the emulation cannot start: no run of this side can run
            lost = list(self.pending) if fatal else self._given() if current is None else [current]
            self._stop({run: {"error": fatal or exited(worker)} for run in lost})

    def _given(self) -> List[int]:
        return [run for run in (self.sent if self.fed else self.pending) if run in self.pending]

    def _stop(self, results: Dict[int, dict]) -> None:
        self.worker.stop()
        for run, result in results.items():
            self.settle(run, result)
        self.worker = None

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker = None


def _timed_out(limit: float) -> dict:
    return {"error": f"did not finish within its time limit of {limit:g} s (the case's `timeout:` in the spec, "
                     f"else --timeout, else {DEFAULT_TIMEOUT:g} s): its worker and everything it started were stopped",
            "kind": TIMED_OUT}


def run_parity(spec: Path, original: Optional[Path] = None, migrated: Optional[Path] = None,
               backing: str = "cpu", progress: Optional[Callable[[str], None]] = None,
               timeout: Optional[float] = None) -> ParityReport:
    """Run every case of ``spec`` on both trees; raises ``SpecError`` for an invalid spec or paths.
    ``timeout``: the time limit of one run of a case whose spec sets none (default ``DEFAULT_TIMEOUT``)."""
    spec = Path(spec).resolve()
    parsed = load_spec(spec)
    original = Path(original or parsed.original or parsed.directory).resolve()
    migrated = Path(migrated or parsed.migrated or default_migrated(original)).resolve()
    for side, tree in (("original", original), ("migrated", migrated)):
        if not tree.is_dir():
            raise SpecError([f"{spec}: the {side} tree {tree} is not a directory"])
    notify = progress or (lambda message: None)
    runs = spec_runs(parsed)
    limits = [case.timeout or timeout or DEFAULT_TIMEOUT for case, _ in runs]

    with tempfile.TemporaryDirectory(prefix="migrate-parity-") as tmp:
        tmp = Path(tmp)
        reaper = Reaper(tmp)
        notify("running the original and the migrated model")
        sides = {side: _Side(side, {"side": side, "tree": str(tree), "other_tree": str(other), "spec": str(spec),
                                    "backing": backing}, limits, tmp, reaper)
                 for side, tree, other in (("original", original, migrated), ("migrated", migrated, original))}
        first, second = sides["original"], sides["migrated"]
        try:
            while first.pending or second.pending:
                first.poll()
                for run, result in first.results.items():
                    if run in second.pending and run not in second.inputs:
                        if result.get("error") or "state" not in result:
                            second.settle(run, {"error": None, "skipped": True})
                        else:
                            second.inputs[run] = str(tmp / f"original.{run}.pt")
                second.poll()
                time.sleep(POLL_SECONDS)
        finally:
            first.stop()
            second.stop()
            reaper.close()
    notify("comparing")
    report = ParityReport(str(spec), str(original), str(migrated), backing, rewritten=rewritten_sites(migrated))
    for run, (case, label) in enumerate(runs):
        report.cases.append(compare_case(case, label, first.results.get(run), second.results.get(run)))
    return report
