"""Finding the files of a tree: which ones to migrate (``.py``) and which to copy unchanged.

In a git work tree (one that does not ignore PATH itself), git decides (``git ls-files --cached --others --exclude-standard``), so every
``.gitignore`` level, ``.git/info/exclude`` and the global excludes are honoured exactly. Outside
git, a plain walk skips ``.git``, ``__pycache__``, ``node_modules`` and virtualenvs (directories
holding ``pyvenv.cfg``) and applies the patterns of the top-level ``.gitignore`` only, with
``fnmatch`` (a simplification: no negation ``!``, no nested ``.gitignore`` files; a pattern with
a ``/`` matches the path from the top, one without matches any path component's name).

Symbolic links are listed with the other files (copied as links, never migrated through).
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, List, Optional, Sequence

SKIP_DIRS = {".git", "__pycache__", "node_modules", ".hg", ".svn"}


@dataclass
class Files:
    """Paths relative to the root, with forward slashes, sorted."""

    python: List[str] = field(default_factory=list)  # candidates for migration
    other: List[str] = field(default_factory=list)  # copied unchanged into the output tree


def discover(root: Path, exclude: Sequence[Path] = ()) -> Files:
    """The files under ``root``; directories in ``exclude`` (e.g. a report dir inside it) are left out."""
    root = Path(root).resolve()
    listed = _git_files(root)
    paths = listed if listed is not None else _walk(root)
    prefixes = [p for p in (relative_dir(root, Path(e)) for e in exclude) if p]
    files = Files()
    for rel in sorted(set(paths)):
        if any(rel == p or rel.startswith(p + "/") for p in prefixes):
            continue
        full = root / rel
        if full.is_symlink() or not full.is_file():
            if full.is_symlink():
                files.other.append(rel)
            continue  # deleted but still in the index, a submodule, a socket...
        (files.python if rel.endswith(".py") else files.other).append(rel)
    return files


def relative_dir(root: Path, path: Path) -> Optional[str]:
    """``path`` relative to the resolved ``root``, with forward slashes; None when outside it."""
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return None


def git_toplevel(path: Path) -> Optional[Path]:
    """The top of the git work tree that tracks ``path``, or None when there is none.

    A directory that the enclosing repository ignores (a package in ``~/.pyenv/versions``, a
    ``build/`` copy) counts as outside git: git neither lists its files nor can restore them.
    """
    try:
        done = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"],
                              capture_output=True, text=True, check=False)
    except OSError:  # git is not installed
        return None
    if done.returncode != 0:
        return None
    ignored = subprocess.run(["git", "-C", str(path), "check-ignore", "-q", "."], capture_output=True, check=False)
    return None if ignored.returncode == 0 else Path(done.stdout.strip())


def _git_files(root: Path) -> Optional[List[str]]:
    if git_toplevel(root) is None:
        return None
    done = subprocess.run(["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                          capture_output=True, check=False)
    if done.returncode != 0:
        return None
    return [p for p in done.stdout.decode("utf-8", "surrogateescape").split("\0") if p]


def _ignore_patterns(root: Path) -> List[str]:
    path = root / ".gitignore"
    if not path.is_file():
        return []
    lines = (line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines())
    return [line for line in lines if line and not line.startswith(("#", "!"))]


def _ignored(rel: str, is_dir: bool, patterns: Iterable[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    for pattern in patterns:
        if pattern.endswith("/"):
            if not is_dir:
                continue
            pattern = pattern.rstrip("/")
        if "/" in pattern:
            if fnmatch.fnmatchcase(rel, pattern.lstrip("/")):
                return True
        elif fnmatch.fnmatchcase(name, pattern):
            return True
    return False


def _walk(root: Path) -> List[str]:
    patterns = _ignore_patterns(root)
    found = []
    for current, dirs, names in os.walk(root):
        base = Path(current).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        kept = [d for d in dirs if d not in SKIP_DIRS and not (Path(current, d) / "pyvenv.cfg").exists()
                and not _ignored(prefix + d, True, patterns)]
        links = [d for d in kept if Path(current, d).is_symlink()]  # listed as files, not entered
        dirs[:] = sorted(d for d in kept if d not in links)
        found.extend(prefix + n for n in [*names, *links] if not _ignored(prefix + n, False, patterns))
    return found
