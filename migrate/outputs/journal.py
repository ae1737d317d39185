"""The in-place journal: an interrupted ``--in-place`` run can always be finished or reverted.

Before the first file in PATH is replaced, the journal directory (``<report-dir>/in-place-journal``,
outside PATH) receives the original and the new bytes of every file the run will write and
``journal.json`` with their hashes, in state ``writing``, all flushed to disk. The writes then
stage their temporary files in the journal directory (same file system: no temporary file is ever
left inside PATH, even after SIGKILL) and the state becomes ``done`` at the end. A journal still in
state ``writing`` means the run stopped half way (Ctrl-C, a full disk, a crash): ``migrate run
PATH --in-place --resume`` writes what is missing, ``--revert`` puts every original back. Both
touch only files whose bytes are still those the journal knows (the original or the new text),
so an edit made since is never overwritten.

The journal names its run (an id, the pid, the start time and the command): an in-place run, once
it holds its locks, replaces the previous journal by one of its own in state ``analysing`` before
it reads a file, so the journal always belongs to the latest run. A run killed before it wrote
anything leaves that state behind: ``--resume`` and ``--revert`` then refuse (there is nothing of
that run to finish or undo, and the run before it is history, never undone by mistake).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Dict, List, Optional

from npu_migrate.migrate.outputs.atomic import FATAL_ERRNOS, OutputDir, write_atomic
from npu_migrate.migrate.runner import WriteOutcome

FORMAT = "npu-migrate-journal"
VERSION = 2  # 2: the run is named; version 1 journals (no run) are still read
JOURNAL_DIR = "in-place-journal"
ANALYSING, WRITING, DONE, REVERTED = "analysing", "writing", "done", "reverted"


class JournalError(Exception):
    """A journal that cannot be used (missing, foreign, for another PATH)."""


def run_identity() -> Dict[str, object]:
    """What names this run in its journal: a fresh id, the pid, the start time and the command."""
    started = datetime.now().isoformat(sep=" ", timespec="seconds")
    return {"id": uuid.uuid4().hex, "pid": os.getpid(), "started": started, "command": " ".join(sys.argv)}


def describe_run(run: Optional[Dict[str, object]]) -> str:
    if not run:
        return "a run of an earlier npu-migrate version"
    return f"the run started {run.get('started')} (pid {run.get('pid')}: {run.get('command')})"


def digest(data: Optional[bytes]) -> Optional[str]:
    return None if data is None else hashlib.sha256(data).hexdigest()


@dataclass
class Entry:
    path: str
    old: Optional[str]  # sha256 of the original bytes; None for a new file (a vendored helper)
    new: str  # sha256 of the bytes the run writes


class Journal:
    def __init__(self, directory: Path, root: Path, entries: List[Entry], state: str,
                 run: Optional[Dict[str, object]] = None) -> None:
        self.directory, self.root, self.entries, self.state = Path(directory), Path(root), entries, state
        self.run = run

    # -- storage ----------------------------------------------------------------------------------
    @property
    def staging(self) -> Path:
        return self.directory / "staging"

    def _blob(self, sha: str) -> Path:
        return self.directory / "blobs" / sha

    def blob(self, sha: Optional[str]) -> Optional[bytes]:
        if sha is None:
            return None
        data = self._blob(sha).read_bytes()
        if digest(data) != sha:
            raise JournalError(f"{self._blob(sha)} is damaged (its hash does not match)")
        return data

    def save(self, state: str) -> None:
        self.state = state
        body = {"format": FORMAT, "version": VERSION, "root": str(self.root), "state": state, "run": self.run,
                "entries": [{"path": e.path, "old": e.old, "new": e.new} for e in self.entries]}
        write_atomic(self.directory / "journal.json", (json.dumps(body, indent=1) + "\n").encode("utf-8"))

    @classmethod
    def begin(cls, directory: Path, root: Path, run: Dict[str, object]) -> "Journal":
        """The journal of a run that starts: the previous one (finished: ``unfinished`` refused any
        other) and its blobs are replaced by an empty journal of ``run`` in state ``analysing``."""
        directory = Path(directory)
        for leftover in ("blobs", "staging"):
            if (directory / leftover).is_dir() and not (directory / leftover).is_symlink():
                shutil.rmtree(directory / leftover)
        journal = cls(directory, root, [], ANALYSING, run)
        journal.save(ANALYSING)
        return journal

    @classmethod
    def create(cls, directory: Path, root: Path, contents: List[tuple],
               run: Optional[Dict[str, object]] = None) -> "Journal":
        """A journal for ``contents`` = [(path, old bytes or None, new bytes)], in state ``writing``."""
        entries = []
        for path, old, new in contents:
            for data in (old, new):
                if data is not None and not cls._exists(directory, digest(data)):
                    write_atomic(Path(directory) / "blobs" / digest(data), data, 0o600)
            entries.append(Entry(path, digest(old), digest(new)))
        journal = cls(directory, root, entries, WRITING, run)
        journal.save(WRITING)
        return journal

    @staticmethod
    def _exists(directory: Path, sha: str) -> bool:
        return (Path(directory) / "blobs" / sha).is_file()

    @classmethod
    def load(cls, directory: Path) -> Optional["Journal"]:
        """The journal in ``directory``, None when there is none; JournalError when it is unusable."""
        path = Path(directory) / "journal.json"
        if not path.is_file():
            return None
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
            if body.get("format") != FORMAT or body.get("version") not in (1, VERSION):
                raise JournalError(f"{path} is not an npu-migrate journal of version {VERSION}")
            entries = [Entry(e["path"], e["old"], e["new"]) for e in body["entries"]]
            run = body.get("run")
            if run is not None and not isinstance(run, dict):
                raise JournalError(f"{path} cannot be read: 'run' is not a mapping")
            return cls(directory, Path(body["root"]), entries, body["state"], run)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise JournalError(f"{path} cannot be read: {exc}") from exc

    # -- writing ----------------------------------------------------------------------------------
    def apply(self, forward: bool, outcome: WriteOutcome) -> WriteOutcome:
        """Bring each file to its new bytes (``forward``) or back to its original, where it is still
        at the other end; record the rest as not written. Returns ``outcome``, completed."""
        with OutputDir(self.root, durable=True, staging=self.staging) as tree:
            for i, entry in enumerate(self.entries):
                want, other = (entry.new, entry.old) if forward else (entry.old, entry.new)
                current = digest(tree.read(entry.path))
                if current == want:
                    continue
                if current != other:
                    outcome.failed[entry.path] = "changed on disk since it was migrated; not written"
                    continue
                try:
                    if want is None:
                        tree.remove(entry.path)
                    else:
                        tree.write(entry.path, self.blob(want), _mode(self.root / entry.path))
                except OSError as exc:
                    outcome.failed[entry.path] = f"{exc.filename or self.root / entry.path}: [Errno {exc.errno}] " \
                                                 f"{exc.strerror or exc}"
                    if exc.errno in FATAL_ERRNOS:
                        for rest in self.entries[i + 1:]:
                            outcome.failed[rest.path] = "not written: the writing stopped after a full disk or " \
                                                        "read-only file system"
                        return outcome
                    continue
                outcome.written.append(entry.path)
        outcome.complete = True
        return outcome


def _mode(path: Path) -> Optional[int]:
    try:
        return path.lstat().st_mode & 0o7777 if path.is_file() and not path.is_symlink() else None
    except OSError:
        return None


def journal_dir(report_dir: Path) -> Path:
    return Path(report_dir) / JOURNAL_DIR
