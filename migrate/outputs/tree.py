"""Writing the migrated tree into a separate directory (``--out``, default ``<PATH>-npu``).

The tree holds every discovered file: migrated files and vendored helpers with their new text,
everything else copied byte for byte (symbolic links as links). Writes go through ``OutputDir``:
atomic, never through a link inside the output, their temporary files staged in a directory of
the report directory (``staging``; what a killed run left there is cleared by the next), so the
tree never holds a temporary file. Files already in the output directory that are not part of
the tree are left alone: nothing is ever deleted. The tree is regenerable, so files are not
fsynced one by one (in-place writes are).

A failed write is recorded, not raised: ``write_tree`` returns a ``WriteOutcome`` naming every
file written and every file not written with its reason; after a full disk or a read-only file
system it stops trying. A helper is written before the files that import it, and a file whose
helper could not be written gets its original text, so the tree never imports a missing helper.
"""

from __future__ import annotations

import os
import shutil
from contextlib import suppress
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from npu_migrate.migrate import diagnostics
from npu_migrate.migrate.findings import FileResult, Finding
from npu_migrate.migrate.outputs.atomic import FATAL_ERRNOS, OutputDir
from npu_migrate.migrate.outputs.changes import Change, helper_path
from npu_migrate.migrate.runner import RunResult, WriteOutcome
from npu_migrate.migrate.sources import SourceError, read_source


def default_out_dir(root: Path) -> Path:
    root = Path(root).resolve()
    return root.with_name(root.name + "-npu")


def os_error(path: Path, exc: OSError) -> str:
    """'PATH: [Errno 28] No space left on device': the path and the OS error, on one line."""
    where = exc.filename or path
    return f"{where}: [Errno {exc.errno}] {exc.strerror or exc}"


NAMES_NO_FILE = (diagnostics.BAD_NAME, diagnostics.UNLISTABLE, diagnostics.PATH_TOO_LONG)


def python_paths(run: RunResult) -> List[str]:
    """The Python files of the tree under their real names (an NPU012 result carries a display name,
    NPU014 and NPU020 results a directory or a path that cannot be opened: none is a file to write)."""
    return [r.path for r in run.files if not (r.findings and r.findings[0].code in NAMES_NO_FILE)]


STAGING_DIR = "tree-staging"  # in the report directory


def write_tree(run: RunResult, changes: Sequence[Change], out: Path,
               outcome: Optional[WriteOutcome] = None, staging: Optional[Path] = None) -> WriteOutcome:
    """Write the tree; ``outcome`` (filled as the writing goes, so it is current even when Ctrl-C
    stops it) is returned. ``staging``: where the temporary files go (None: beside each target)."""
    out = Path(out)
    if staging is not None and staging.is_dir() and not staging.is_symlink():
        shutil.rmtree(staging, ignore_errors=True)  # left by a killed run (the caller holds the lock)
    outcome = outcome if outcome is not None else WriteOutcome(str(out))
    by_path = {c.path: c for c in changes}
    order = [c.path for c in changes if c.helper]
    order += [rel for rel in sorted({*run.copied, *python_paths(run)}) if rel not in order]
    failed_helpers: Dict[str, str] = {}
    results = {r.path: r for r in run.files}
    with OutputDir(out, durable=False, staging=staging) as tree:
        for i, rel in enumerate(order):
            change = by_path.get(rel)
            try:
                if change is not None and not _needs_missing_helper(results.get(rel), failed_helpers):
                    source = run.root / rel
                    mode = source.stat().st_mode & 0o7777 if source.is_file() and not change.helper else None
                    tree.write(rel, change.new.encode("utf-8"), mode)
                else:
                    _copy(run.root / rel, tree, rel)
                    if change is not None:
                        why = _needs_missing_helper(results.get(rel), failed_helpers)
                        outcome.failed[rel] = f"written unchanged: {why}"
                        continue
            except (OSError, SourceError) as exc:
                why = os_error(out / rel, exc) if isinstance(exc, OSError) else f"{run.root / rel} {exc.message}"
                outcome.failed[rel] = why
                if change is not None and change.helper:
                    failed_helpers[rel] = f"its helper {rel} could not be written ({why})"
                if isinstance(exc, OSError) and exc.errno in FATAL_ERRNOS:
                    for rest in order[i + 1:]:
                        outcome.failed[rest] = f"not written: the writing stopped after {why}"
                    break
                continue
            outcome.written.append(rel)
        else:
            outcome.complete = True
    if staging is not None:
        with suppress(OSError):
            os.rmdir(staging)
    mark_unwritten(run, outcome)
    return outcome


def _needs_missing_helper(result, failed_helpers: Dict[str, str]) -> str:
    """Why ``result``'s migration cannot be written: a helper it imports was not ('' when none)."""
    if result is None or not failed_helpers:
        return ""
    helpers = (helper_path(result.path, n) for n in result.helpers)
    return next((failed_helpers[h] for h in helpers if h in failed_helpers), "")


def _copy(source: Path, tree: OutputDir, rel: str) -> None:
    if source.is_symlink():
        tree.link(rel, os.readlink(source))
    else:
        tree.write(rel, read_source(source), source.stat().st_mode & 0o7777)


UNWRITTEN = (diagnostics.WRITE_ERROR, diagnostics.CHANGED_DURING_RUN)


def mark_unwritten(run: RunResult, outcome: WriteOutcome) -> None:
    """A Python file whose migration was not written becomes an NPU013 error (the report says so)."""
    for i, result in enumerate(run.files):
        why = outcome.failed.get(result.path)
        if why is None or result.status == "error" and result.findings[-1].code in UNWRITTEN:
            continue
        code = diagnostics.CHANGED_DURING_RUN if why.startswith("changed on disk") else diagnostics.WRITE_ERROR
        message = why if code == diagnostics.CHANGED_DURING_RUN else f"not written: {why}"
        finding = Finding(code, message, "reported", path=result.path)
        error = f"{result.path}: {code} {message}"
        if result.error:  # already an error (e.g. unreadable): it stays first
            error = f"{result.error}; {code} {message}"
        run.files[i] = FileResult(result.path, "error", [*result.findings, finding], error=error, digest=result.digest)
