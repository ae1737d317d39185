"""``--in-place``: writing the changed files back into PATH, with safeguards.

Policy: in-place runs only on a clean git work tree (no modified, staged or untracked files under
PATH), where ``git checkout``/``git clean`` undoes the migration exactly. A dirty tree, or a PATH
outside git, is refused unless ``--force``; a forced run keeps a backup ``<file>.orig`` of every
file it modifies (an existing ``.orig`` is kept: it holds the older original). Every write is
atomic, keeps the file's permissions, never follows a link, and goes through the journal
(``migrate.outputs.journal``) so that an interrupted run can be finished or reverted.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Optional, Sequence

from npu_migrate.migrate.discovery import git_toplevel, relative_dir
from npu_migrate.migrate.outputs.atomic import OutputDir
from npu_migrate.migrate.outputs.changes import Change
from npu_migrate.migrate.outputs.journal import (ANALYSING, DONE, REVERTED, WRITING, Journal, JournalError,
                                                  describe_run, journal_dir)
from npu_migrate.migrate.runner import WriteOutcome


class InPlaceRefused(Exception):
    """PATH is not a clean git work tree and ``--force`` was not given."""


def check_in_place(root: Path, force: bool, exclude: Sequence[Path] = ()) -> bool:
    """Raise ``InPlaceRefused`` (with the reason) unless in-place writing is allowed; return whether
    backups are needed. ``exclude``: directories under PATH to ignore (the report directory)."""
    problem = _why_unsafe(Path(root), exclude)
    if problem is None:
        return False
    if not force:
        raise InPlaceRefused(f"{problem}; commit or stash first, or pass --force (backups <file>.orig are kept)")
    return True


def _why_unsafe(root: Path, exclude: Sequence[Path]) -> Optional[str]:
    if git_toplevel(root) is None:
        return f"{root} is not in a git work tree, so the originals could not be restored"
    resolved = root.resolve()
    pathspec = ["."] + [f":(exclude){rel}" for rel in (relative_dir(resolved, Path(e)) for e in exclude) if rel]
    done = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", *pathspec],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"git status failed in {root}: {done.stderr.strip()}"
    dirty = done.stdout.splitlines()
    if dirty:
        shown = ", ".join(line[3:] for line in dirty[:3]) + (" ..." if len(dirty) > 3 else "")
        return f"{root} has uncommitted changes ({shown})"
    return None


def write_in_place(root: Path, changes: Sequence[Change], backup: bool, journal_dir: Path,
                   outcome: Optional[WriteOutcome] = None, run: Optional[dict] = None) -> WriteOutcome:
    """Write each change into ``root`` through the journal in ``journal_dir`` (outside PATH).

    With ``backup``, a file that is modified first gets a ``<file>.orig`` copy (an existing one is
    kept). A file whose bytes changed since it was migrated is not written (NPU015). ``outcome``
    is filled as the writing goes (current even when Ctrl-C stops it) and returned.
    """
    root = Path(root)
    contents = []
    for change in sorted(changes, key=lambda c: not c.helper):  # helpers first: nothing imports a missing one
        old = change.old.encode("utf-8") if change.old is not None else None
        contents.append((change.path, old, change.new.encode("utf-8")))
    journal = Journal.create(journal_dir, root, contents, run)
    outcome = outcome if outcome is not None else WriteOutcome(str(root))
    outcome.journal = str(journal.directory)
    if backup:
        try:
            _back_up(root, contents, journal, outcome)
        except OSError as exc:  # no file is migrated without its backup
            why = f"not written: a backup could not be written ({exc.filename}: [Errno {exc.errno}] {exc.strerror})"
            outcome.failed.update((path, why) for path, _, _ in contents)
            journal.save(REVERTED)
            return outcome
    journal.apply(True, outcome)
    journal.save(DONE if outcome.complete else WRITING)
    return outcome


def _back_up(root: Path, contents, journal: Journal, outcome: WriteOutcome) -> None:
    with OutputDir(root, durable=True, staging=journal.staging) as tree:
        for path, old, _ in contents:
            saved = path + ".orig"
            if old is not None and not os.path.lexists(root / saved) and tree.read(path) == old:
                tree.write(saved, old, (root / path).stat().st_mode & 0o7777)
                outcome.backups.append(saved)


def begin_in_place(report_dir: Path, root: Path, run: dict) -> Journal:
    """Make the journal in ``report_dir`` this run's (see ``migrate.outputs.journal``)."""
    return Journal.begin(journal_dir(report_dir), Path(root).resolve(), run)


def finish_journal(report_dir: Path, root: Path, forward: bool) -> WriteOutcome:
    """``--resume`` (forward) or ``--revert`` the in-place run of the journal: the latest one."""
    journal = Journal.load(journal_dir(report_dir))
    if journal is None:
        raise JournalError(f"no in-place journal in {journal_dir(report_dir)}")
    if journal.root.resolve() != Path(root).resolve():
        raise JournalError(f"the journal in {journal.directory} is for {journal.root}, not {root}")
    if journal.state == ANALYSING:
        raise JournalError(
            f"nothing to {'finish' if forward else 'undo'}: the latest in-place run on {journal.root}, "
            f"{describe_run(journal.run)}, stopped before it wrote any file; the runs before it are not in the "
            f"journal (undo those with git). Run `migrate run {journal.root} --in-place` again to migrate.")
    outcome = journal.apply(forward, WriteOutcome(str(root), journal=str(journal.directory)))
    journal.save((DONE if forward else REVERTED) if outcome.complete else WRITING)
    return outcome


def unfinished_journal(report_dir: Path) -> Optional[str]:
    """A message when ``report_dir`` holds the journal of an in-place run that did not finish."""
    try:
        journal = Journal.load(journal_dir(report_dir))
    except JournalError as exc:
        return str(exc)
    if journal is None or journal.state != WRITING:
        return None
    return (f"an earlier --in-place run on {journal.root}, {describe_run(journal.run)}, did not finish "
            f"(journal {journal.directory}); pass --resume to finish it or --revert to undo it")
