"""The file changes a run produces: each migrated file, plus the helper modules they import.

A helper (``migrate/helpers/<name>.py``) is vendored beside the file that imports it, as
``<dir>/<name>.py``. A helper already present there with the same text (a tree migrated before)
is no change; one present with other text is replaced.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from npu_migrate.migrate.runner import RunResult

HELPERS_DIR = Path(__file__).resolve().parents[1] / "helpers"


@dataclass(frozen=True)
class Change:
    path: str  # relative to the root, forward slashes
    old: Optional[str]  # None for a new file
    new: str


def helper_source(name: str) -> str:
    path = HELPERS_DIR / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"helper module template {path} is missing (a rule asked for helper {name!r})")
    return path.read_text(encoding="utf-8")


def helper_path(file_path: str, name: str) -> str:
    directory = file_path.rsplit("/", 1)[0] + "/" if "/" in file_path else ""
    return f"{directory}{name}.py"


def collect_changes(run: RunResult) -> List[Change]:
    """Every file to write, sorted by path."""
    changes = {r.path: Change(r.path, r.original, r.migrated) for r in run.changed}
    helpers: Dict[str, str] = {}
    for result in run.changed:
        for name in result.helpers:
            helpers[helper_path(result.path, name)] = helper_source(name)
    for path, text in helpers.items():
        if path in changes:
            continue  # a user file of that name was migrated itself; never overwrite it with a helper
        existing = run.root / path
        old = existing.read_bytes().decode("utf-8", "replace") if existing.is_file() else None
        if old != text:
            changes[path] = Change(path, old, text)
    return [changes[p] for p in sorted(changes)]
