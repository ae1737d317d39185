"""The vendored helper beside migrated files: what becomes of ``<dir>/npu_glue.py`` in a run.

A directory's helper holds the sections its files call (``helpers.assemble``): those the files this
run changes use, and, where an unedited copy is there already, the sections in its header too (the
files migrated before and not changed again use those). What is at that path decides the rest:

- nothing: the helper is written (a new file);
- an unedited copy (its header's hash matches the text below it) with every section wanted, as
  this version writes them: no change; older, or without a section: upgraded in place (a change
  like any other, in the patch);
- an edited copy, or one a newer npu-migrate wrote: kept, never replaced. The files that use only
  names it defines are migrated beside it and NPU018 says it was kept; a file that uses a name it
  lacks is left unchanged (NPU011, naming the names);
- anything else, a user's own module of that name (no header), a symbolic link (never read: it
  could point at ``/etc/passwd``), a directory, an unreadable file: never replaced, and the files
  that need the helper are left unchanged (NPU011), so no migrated file imports a helper that is
  not there.

An unedited older copy is upgraded even where no file of the run needs it (a newer npu-migrate run
on a tree an older one migrated); a re-run of the same version on its own output changes nothing.
"""

from __future__ import annotations

import ast
import re
import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, Optional, Set, Tuple


from .. import __version__, diagnostics
from ..diffs import Change
from ..findings import Finding
from ..helpers import HELPER, is_helper_file
from ..helpers.assemble import Header, assemble, split, unedited, used_names
from ..helpers.sections import defining, sections, top_level_names, unknown, with_needs
from ..sources import SourceError, read_source


def helper_path(file_path: str, name: str = HELPER) -> str:
    directory = file_path.rsplit("/", 1)[0] + "/" if "/" in file_path else ""
    return f"{directory}{name}.py"


@dataclass(frozen=True)
class Copy:
    """What becomes of the helper at ``path``."""

    path: str
    change: Optional[Change] = None  # the helper written or upgraded (None: nothing to write)
    refused: Optional[str] = None  # why no file may use what is there (NPU011 for each that needs it)
    kept: Optional[FrozenSet[str]] = None  # an edited or newer copy kept: the names it defines
    note: Optional[str] = None  # a kept copy: NPU018's message

    def blocks(self, names: Iterable[str]) -> Optional[str]:
        """Why a file using the helper's ``names`` cannot be migrated beside this copy (None: it can)."""
        if self.refused is not None:
            return self.refused
        if self.kept is None:
            return None
        names = set(names)
        missing = sorted(names - unknown(names) - self.kept)
        if not missing:
            return None
        return f"{self.path} is an edited copy of the vendored helper that lacks {', '.join(missing)}"


def plan(root: Path, path: str, names: Optional[Set[str]]) -> Copy:
    """The helper at ``root/path`` for files using ``names`` of it (None: no file of this run uses it;
    an unedited older copy is still upgraded)."""
    full = root / path
    try:
        info = os.lstat(full)
    except FileNotFoundError:
        return Copy(path) if names is None else Copy(path, change=Change(path, None, assemble(defining(names)),
                                                                          helper=True))
    except OSError as exc:
        return Copy(path, refused=f"{path} cannot be examined ({exc.strerror})")
    if stat.S_ISLNK(info.st_mode):
        return Copy(path, refused=f"{path} is a symbolic link (never read or replaced)")
    if not stat.S_ISREG(info.st_mode):
        return Copy(path, refused=f"{path} is a directory or another non-file")
    try:
        text = read_source(full).decode("utf-8")
    except SourceError as exc:
        return Copy(path, refused=f"{path} {exc.message}")
    except UnicodeDecodeError:
        text = ""
    header, _ = split(text)
    if header is None:
        return Copy(path, refused=f"{path} is not the vendored helper (your own file: its first line is not "
                                  "npu-migrate's header)")
    if not unedited(text) or _newer(header):
        return _kept(path, text, header, names or set())
    wanted = set(header.sections) if set(header.sections) <= set(sections()) else set(sections())
    new = assemble(wanted | defining(names or ()))
    return Copy(path) if new == text else Copy(path, change=Change(path, text, new, helper=True))


def _newer(header: Header) -> bool:
    """The copy was written by a later npu-migrate release than this one (``X.Y.Z`` numbers; anything
    else is not known to be newer). Plain numbers, so that a warm run imports no version library."""
    theirs, ours = _release(header.version), _release(__version__)
    return theirs is not None and ours is not None and theirs > ours


def _release(version: str) -> Optional[Tuple[int, ...]]:
    match = re.match(r"(\d+(?:\.\d+)*)", version or "")
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def _kept(path: str, text: str, header: Header, names: Set[str]) -> Copy:
    try:
        defined = frozenset(top_level_names(ast.parse(text)))
    except (SyntaxError, ValueError):
        defined = frozenset()
    why = f"written by npu-migrate {header.version}, newer than this one" if _newer(header) else \
        "an edited copy (its text does not match the hash in its first line)"
    note = (f"{path} is kept: {why}; npu-migrate {__version__} would write the sections "
            f"{', '.join(with_needs(defining(names)))} here instead")
    return Copy(path, kept=defined, note=note)


def _needs(run) -> Dict[str, Dict[str, Set[str]]]:
    """helper path -> {file this run changes that imports it: the helper names the file uses}."""
    found: Dict[str, Dict[str, Set[str]]] = {}
    for result in run.changed:
        for name in result.helpers:
            if name != HELPER:
                raise ValueError(f"a rule asked for helper {name!r}; npu-migrate vendors only {HELPER!r}")
            found.setdefault(helper_path(result.path), {})[result.path] = used_names(result.migrated or "")
    return found


def plan_copies(run) -> Dict[str, Copy]:
    """Every helper path of the run: those the changed files import, and the copies already there
    (an unedited older one is upgraded)."""
    needs = _needs(run)
    there = {r.path for r in run.files if is_helper_file(r.path)}
    return {path: plan(run.root, path, set().union(*needs[path].values()) if path in needs else None)
            for path in sorted(needs.keys() | there)}


def note_kept(run, copies: Dict[str, Copy]) -> None:
    """An NPU018 warning for each kept copy that files of this run were migrated beside: on the copy's
    own entry in ``run.files`` (else the first such file's)."""
    for copy in copies.values():
        if copy.note is None:
            continue
        users = [r.path for r in run.changed if HELPER in r.helpers and helper_path(r.path) == copy.path]
        if not users:
            continue
        where = copy.path if any(r.path == copy.path for r in run.files) else users[0]
        i = next(i for i, r in enumerate(run.files) if r.path == where)
        finding = Finding(diagnostics.HELPER_KEPT, copy.note, "reported", path=where)
        run.files[i] = replace(run.files[i], findings=[*run.files[i].findings, finding])
