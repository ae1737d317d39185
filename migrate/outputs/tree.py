"""Writing the migrated tree into a separate directory (``--out``, default ``<PATH>-npu``).

The tree holds every discovered file: migrated files and vendored helpers with their new text,
everything else copied byte for byte (symbolic links as links). Each write is atomic. Files already
in the output directory that are not part of the tree are left alone: nothing is ever deleted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from npu_migrate.migrate.outputs.atomic import link_atomic, write_atomic
from npu_migrate.migrate.outputs.changes import Change
from npu_migrate.migrate.runner import RunResult


def default_out_dir(root: Path) -> Path:
    root = Path(root).resolve()
    return root.with_name(root.name + "-npu")


def write_tree(run: RunResult, changes: Sequence[Change], out: Path) -> None:
    out = Path(out)
    written = {c.path for c in changes}
    for rel in [*run.copied, *(r.path for r in run.files)]:
        if rel not in written:
            _copy(run.root / rel, out / rel)
    for change in changes:
        source = run.root / change.path
        mode = source.stat().st_mode & 0o7777 if source.is_file() else None
        write_atomic(out / change.path, change.new.encode("utf-8"), mode)


def _copy(source: Path, dest: Path) -> None:
    if source.is_symlink():
        link_atomic(dest, os.readlink(source))
    else:
        write_atomic(dest, source.read_bytes(), source.stat().st_mode & 0o7777)
