"""Finding the files of a tree: which ones to migrate (``.py``, notebooks, and scripts whose ``#!``
line names python: ``is_python_script``), which to copy unchanged, and which are left out, each
with its reason, so that every file under PATH is either in the output or named in the report.

In a git work tree (one that does not ignore PATH itself), git decides (``git ls-files --cached
--others --exclude-standard``), so every ``.gitignore`` level, ``.git/info/exclude`` and the global
excludes are honoured exactly; the ignored files and directories git names (``--ignored
--directory``) are the excluded ones. Outside git, a walk applies every ``.gitignore`` file of the
tree with full gitignore semantics (the ``pathspec`` library: negation ``!``, nested files whose
patterns are relative to their own directory, directory-only patterns, ``**``); as in git, a file
below an ignored directory cannot be re-included. The walk also leaves out ``.git``,
``__pycache__``, ``node_modules`` and virtualenvs (directories holding ``pyvenv.cfg``); a
directory it cannot list is reported (NPU014), not fatal.

Symbolic links are listed with the other files (copied as links, never migrated through).

A path longer than the system lets a program open by name (``PATH_MAX``) is reported (NPU020),
never entered or read, whether the walk meets it or git warns that it could not open it.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:
    import pathspec

try:
    PATH_MAX = os.pathconf("/", "PC_PATH_MAX")
except (OSError, ValueError, AttributeError):
    PATH_MAX = 4096
SKIP_DIRS = {".git": "version-control metadata", ".hg": "version-control metadata",
             ".svn": "version-control metadata", "__pycache__": "bytecode cache",
             "node_modules": "JavaScript dependencies"}


@dataclass(frozen=True)
class Excluded:
    """A path under PATH that is not in the output, and why (a directory, ending in ``/``, stands for
    all its files)."""

    path: str
    reason: str


@dataclass
class Files:
    """Paths relative to the root, with forward slashes, sorted."""

    python: List[str] = field(default_factory=list)  # candidates for migration
    other: List[str] = field(default_factory=list)  # copied unchanged into the output tree
    excluded: List[Excluded] = field(default_factory=list)  # left out, with the reason
    unlistable: List[Excluded] = field(default_factory=list)  # directories that could not be read (NPU014)
    too_long: List[Excluded] = field(default_factory=list)  # paths over PATH_MAX (NPU020)


def too_long(path: Path) -> Optional[str]:
    """Why ``path`` cannot be opened by name (it is over ``PATH_MAX`` bytes), or None."""
    size = len(os.fsencode(str(path)))
    if size < PATH_MAX:
        return None
    return f"the path is {size:,} bytes, over the system's limit of {PATH_MAX:,} (PATH_MAX): not migrated or copied"


def discover(root: Path, exclude: Sequence[Path] = ()) -> Files:
    """The files under ``root``; directories in ``exclude`` (e.g. a report dir inside it) are left out."""
    root = Path(root).resolve()
    files = Files()
    listed = _git_files(root, files)
    paths = listed if listed is not None else _walk(root, files)
    prefixes = [p for p in (relative_dir(root, Path(e)) for e in exclude) if p]
    for rel in sorted(set(paths)):
        if any(rel == p or rel.startswith(p + "/") for p in prefixes):
            continue
        full = root / rel
        if too_long(full):
            files.too_long.append(Excluded(rel, too_long(full)))
            continue
        if full.is_symlink() or not full.is_file():
            if full.is_symlink():
                files.other.append(rel)
            elif full.is_dir():
                files.excluded.append(Excluded(rel + "/", "a nested git repository (submodule): not entered"))
            elif os.path.lexists(full):
                files.excluded.append(Excluded(rel, "not a regular file (a socket, FIFO or device): not copied"))
            continue  # deleted but still in the index
        (files.python if is_migratable(rel) or is_python_script(full) else files.other).append(rel)
    for prefix in prefixes:
        if (root / prefix).exists():
            files.excluded.append(Excluded(prefix + "/", "the output or report directory of this run"))
    files.excluded.sort(key=lambda e: e.path)
    return files


def is_migratable(rel: str) -> bool:
    """A file the engine migrates: Python source, or a Jupyter notebook (its code cells)."""
    return rel.endswith((".py", ".ipynb"))


_PYTHON = re.compile(rb"python[0-9.]*")  # python, python3, python3.11
_ENV_ARGUMENT = {b"-u", b"--unset", b"-C", b"--chdir"}  # env options that take the next word
SHEBANG_BYTES = 256  # what is read of a candidate script


def is_python_script(path: Path) -> bool:
    """Whether ``path`` is a Python script by its content: a file without a suffix, or an executable
    one, whose first line is a ``#!`` naming python (``#!/usr/bin/env python3``,
    ``#!/usr/bin/python3.11 -u``, ``#!/usr/bin/env -S python3 -X dev``). Only the first
    ``SHEBANG_BYTES`` are read, never through a link, never from anything but a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (Path(path).suffix and not info.st_mode & 0o111):
            return False
        head = os.read(fd, SHEBANG_BYTES)
    except OSError:
        return False
    finally:
        os.close(fd)
    if not head.startswith(b"#!"):
        return False
    words = head[2:].split(b"\n", 1)[0].split()
    if words and os.path.basename(words[0]) == b"env":
        rest, words = words[1:], []
        while rest:
            word = rest.pop(0)
            if word in _ENV_ARGUMENT:
                rest = rest[1:]
            elif not (word.startswith(b"-") or b"=" in word):
                words = [word]
                break
    return bool(words) and _PYTHON.fullmatch(os.path.basename(words[0])) is not None


def relative_dir(root: Path, path: Path) -> Optional[str]:
    """``path`` relative to the resolved ``root``, with forward slashes; None when outside it."""
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return None


def git_toplevel(path: Path) -> Optional[Path]:
    """The top of the git work tree that tracks ``path``, or None when there is none.

    A directory that the enclosing repository ignores (a package in ``~/.pyenv/versions``, a
    ``build/`` copy) counts as outside git: git neither lists its files nor can restore them; so
    does a directory inside a virtual environment that the repository holds without ignoring it.
    """
    try:
        done = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"],
                              capture_output=True, text=True, check=False)
    except OSError:  # git is not installed
        return None
    if done.returncode != 0:
        return None
    top = Path(done.stdout.strip())
    if in_virtualenv(Path(path).resolve(), top.resolve()):
        return None
    ignored = subprocess.run(["git", "-C", str(path), "check-ignore", "-q", "."], capture_output=True, check=False)
    return None if ignored.returncode == 0 else top


def in_virtualenv(path: Path, top: Path) -> bool:
    """Whether ``path`` lies in a virtual environment (a directory holding ``pyvenv.cfg``) below
    ``top``: a package pip put in a ``venv/`` inside a clone is not the repository's code."""
    return any((parent / "pyvenv.cfg").is_file() for parent in (path, *path.parents) if parent != top and top in parent.parents)


def _git_files(root: Path, files: Files) -> Optional[List[str]]:
    if git_toplevel(root) is None:
        return None
    listed = _git_ls(root, "--cached", "--others", "--exclude-standard", problems=files.unlistable,
                     long_paths=files.too_long)
    if listed is None:
        return None
    for rel in _git_ls(root, "--others", "--ignored", "--exclude-standard", "--directory") or ():
        files.excluded.append(Excluded(rel, "ignored by git (.gitignore, .git/info/exclude or the global excludes)"))
    if (root / ".git").exists():
        files.excluded.append(Excluded(".git/", SKIP_DIRS[".git"]))
    return listed


# git cuts a long warning short: the reason (and the closing quote) may be missing
_UNOPENED = re.compile(r"^warning: could not open directory '(.*?)(?:': (.*))?$")


def _git_ls(root: Path, *options: str, problems: Optional[List[Excluded]] = None,
            long_paths: Optional[List[Excluded]] = None) -> Optional[List[str]]:
    """``git ls-files`` output; directories git could not open (it only warns) go to ``problems``,
    those it could not open for the length of their path to ``long_paths``."""
    done = subprocess.run(["git", "-C", str(root), "ls-files", *options, "-z"], capture_output=True, check=False)
    if done.returncode != 0:
        return None
    if problems is not None and long_paths is not None:
        for line in done.stderr.decode("utf-8", "surrogateescape").splitlines():
            match = _UNOPENED.match(line)
            if match and (match.group(2) is None or "too long" in match.group(2) or too_long(root / match.group(1))):
                long_paths.append(Excluded(match.group(1), too_long(root / match.group(1)) or
                                           "the path is over the system's limit (PATH_MAX): not migrated or copied"))
            elif match:
                problems.append(Excluded(match.group(1), f"cannot be listed: {match.group(2)}"))
    return [p for p in done.stdout.decode("utf-8", "surrogateescape").split("\0") if p]


class _Ignores:
    """The ``.gitignore`` files met so far on the walk, each applying below its own directory."""

    def __init__(self) -> None:
        self.specs: Dict[str, "pathspec.GitIgnoreSpec"] = {}  # directory ("" for the root) -> its patterns

    def read(self, root: Path, base: str, files: Files) -> None:
        path = root / base / ".gitignore" if base else root / ".gitignore"
        if too_long(path) or not path.is_file() or path.is_symlink():
            return
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as exc:
            files.unlistable.append(Excluded(_rel(base, ".gitignore"), f"cannot be read: {exc.strerror}"))
            return
        import pathspec  # only a walk outside git reads .gitignore files itself

        self.specs[base] = pathspec.GitIgnoreSpec.from_lines(lines)

    def why(self, rel: str, is_dir: bool) -> Optional[str]:
        """The ignoring pattern and its file, when ``rel`` is ignored (deeper files win, last match wins)."""
        verdict: Optional[Tuple[str, str]] = None
        for base, spec in self.specs.items():
            if base and not rel.startswith(base + "/"):
                continue
            inner = rel[len(base) + 1:] if base else rel
            check = spec.check_file(inner + "/" if is_dir else inner)
            if check.include is not None and (verdict is None or base.count("/") >= verdict[0].count("/")):
                pattern = spec.patterns[check.index].pattern if check.index is not None else "?"
                verdict = (base, pattern if check.include else "")
        if verdict is None or not verdict[1]:
            return None
        return f"ignored by {_rel(verdict[0], '.gitignore')} (pattern {verdict[1]!r})"


def _rel(base: str, name: str) -> str:
    return f"{base}/{name}" if base else name


def _is_venv(directory: Path) -> bool:
    try:
        return (directory / "pyvenv.cfg").exists()
    except OSError:  # e.g. the name is one byte too long: then it holds no pyvenv.cfg either
        return False


def _walk(root: Path, files: Files) -> List[str]:
    ignores = _Ignores()
    found = []

    def unlistable(exc: OSError) -> None:
        rel = Path(exc.filename).relative_to(root).as_posix() if exc.filename else "?"
        rel = ("" if rel == "." else rel) + "/"
        if exc.errno == errno.ENAMETOOLONG:
            files.too_long.append(Excluded(rel, too_long(Path(exc.filename)) or f"cannot be listed: {exc.strerror}"))
        else:
            files.unlistable.append(Excluded(rel, f"cannot be listed: {exc.strerror or exc}"))

    for current, dirs, names in os.walk(root, onerror=unlistable):
        base = Path(current).relative_to(root).as_posix()
        base = "" if base == "." else base
        ignores.read(root, base, files)
        kept = []
        for d in sorted(dirs):
            rel = _rel(base, d)
            full = Path(current, d)
            if too_long(full):  # reported, never entered
                files.too_long.append(Excluded(rel + "/", too_long(full)))
                continue
            reason = SKIP_DIRS.get(d) or ("a virtual environment" if _is_venv(full) else None) \
                or ignores.why(rel, not full.is_symlink())
            if reason:
                files.excluded.append(Excluded(rel + "/", reason))
            elif full.is_symlink():
                found.append(rel)  # listed as a file (copied as a link), not entered
            else:
                kept.append(d)
        dirs[:] = kept
        for name in names:
            rel = _rel(base, name)
            reason = ignores.why(rel, False)
            if reason:
                files.excluded.append(Excluded(rel, reason))
            else:
                found.append(rel)
    return found
