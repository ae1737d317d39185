"""``--in-place``: writing the changed files back into PATH, with safeguards.

Policy: in-place runs only on a clean git work tree (no modified, staged or untracked files under
PATH), where ``git checkout``/``git clean`` undoes the migration exactly. A dirty tree, or a PATH
outside git, is refused unless ``--force``; a forced run keeps a backup ``<file>.orig`` of every
file it modifies (an existing ``.orig`` is kept: it holds the older original). Every write is
atomic and keeps the file's permissions.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import List, Optional, Sequence

from npu_migrate.migrate.discovery import git_toplevel, relative_dir
from npu_migrate.migrate.outputs.atomic import write_atomic
from npu_migrate.migrate.outputs.changes import Change


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


def write_in_place(root: Path, changes: Sequence[Change], backup: bool) -> List[Path]:
    """Write each change into ``root``; returns the backup files made."""
    root = Path(root)
    backups = []
    for change in changes:
        target = root / change.path
        if backup and change.old is not None:
            saved = target.with_name(target.name + ".orig")
            if not saved.exists():
                write_atomic(saved, target.read_bytes(), target.stat().st_mode & 0o7777)
                backups.append(saved)
        write_atomic(target, change.new.encode("utf-8"))
    return backups
