"""The file changes a run produces: each migrated file, plus the helper modules they import.

A helper (``migrate/helpers/<name>.py``) is vendored beside the file that imports it, as
``<dir>/<name>.py``. A helper already there with the same text (a tree migrated before) is no
change. Anything else at that path, a user's own module of that name, an older or edited copy, a
symbolic link (never read: it could point at ``/etc/passwd``) or a directory, is never replaced:
the files of that directory that need the helper are turned into NPU011 error results (left
unchanged), so no migrated file imports a helper that is not there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Dict, List, Optional

from .. import diagnostics
from ..diffs import Change  # noqa: F401 (the outputs read it here)
from ..findings import error_result
from ..runner import RunResult
from ..sources import SourceError, read_source

HELPERS_DIR = Path(__file__).resolve().parents[1] / "helpers"


def helper_source(name: str) -> str:
    path = HELPERS_DIR / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"helper module template {path} is missing (a rule asked for helper {name!r})")
    return path.read_text(encoding="utf-8")


def helper_path(file_path: str, name: str) -> str:
    directory = file_path.rsplit("/", 1)[0] + "/" if "/" in file_path else ""
    return f"{directory}{name}.py"


def _in_the_way(root: Path, path: str, text: str) -> Optional[str]:
    """Why ``root/path`` cannot become the helper ``text`` (None: absent, or already the helper)."""
    full = root / path
    try:
        info = os.lstat(full)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be examined ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link (never read or replaced)"
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is a directory or another non-file"
    try:
        existing = read_source(full)
    except SourceError as exc:
        return f"{path} {exc.message}"
    if existing == text.encode("utf-8"):
        return None
    return f"{path} is not the vendored helper (your own file, or an edited copy)"


def collect_changes(run: RunResult) -> List[Change]:
    """Every file to write, sorted by path; helpers that would replace something else are refused
    and the files that need them become NPU011 errors in ``run.files``."""
    helpers: Dict[str, str] = {}
    for result in run.changed:
        for name in result.helpers:
            helpers.setdefault(helper_path(result.path, name), helper_source(name))
    refused = {path: why for path, text in helpers.items() if (why := _in_the_way(run.root, path, text))}
    if refused:
        for i, result in enumerate(run.files):
            if result.status != "changed":
                continue
            blocked = [refused[p] for p in (helper_path(result.path, n) for n in result.helpers) if p in refused]
            if blocked:
                run.files[i] = error_result(result.path, diagnostics.HELPER_CONFLICT,
                                            f"{blocked[0]}; this file needs the helper and is left unchanged")
    changes = {r.path: Change(r.path, r.original, r.migrated, diff=r.diff) for r in run.changed}
    for path, text in helpers.items():
        if path not in refused and path not in changes and not os.path.lexists(run.root / path):
            changes[path] = Change(path, None, text, helper=True)
    return [changes[p] for p in sorted(changes)]
