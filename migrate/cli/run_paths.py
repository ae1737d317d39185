"""Where ``migrate run`` may write: PATH, the output tree and the report directory, confined.

All three are resolved (symbolic links included) before anything is written, and must not
overlap: the output tree is never PATH, inside PATH or above it (a ``<PATH>-npu`` that is a link
to PATH), and the output tree and the report directory are not inside each other. The report
directory is never PATH itself or above it (a ``--report-dir`` naming PATH would overwrite the
user's own ``report.md``); inside PATH it is allowed (CI keeps its reports in the checkout) when it
is new or holds nothing but what npu-migrate writes there, and discovery leaves it out. The
default report directory, ``./npu-migrate-report``, moves beside PATH (``<PATH>-npu-report``) when
the current directory is inside PATH. Directories that exist must be directories and writable,
which a probe checks before the run (a read-only target fails here with exit 32, not after the
migration).

PATH may be a single Python file or notebook: the run's root is then its directory, and only that
file is migrated (``Paths.only``).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


DEFAULT_REPORT_DIR = Path("npu-migrate-report")
# what a run, a --check with --report-dir, `migrate report` and the demo write into a report directory
REPORT_FILES = {"changes.patch", "report.json", "report.md", "report.sarif", "report.html", "parity.json", "journal",
                "in-place-journal", "tree-staging", "parity.yaml", "parity_harness.py", "__pycache__"}


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class Paths:
    root: Path  # PATH, resolved (a single file's directory)
    out_dir: Optional[Path]  # None for --in-place
    report_dir: Path
    only: Optional[str] = None  # PATH was this file of ``root``: the only one migrated


def _inside(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def _overlap(a: Path, b: Path) -> bool:
    return _inside(a, b) or _inside(b, a)


def _directory(path: Path, what: str) -> Path:
    resolved = Path(os.path.abspath(path)).resolve()
    if resolved.exists() and not resolved.is_dir():
        raise ConfigError(f"the {what} {path} exists and is not a directory")
    return resolved


def _only_ours(directory: Path) -> bool:
    """Whether ``directory`` is new or holds only what npu-migrate writes into a report directory."""
    try:
        return not directory.exists() or all(entry.name in REPORT_FILES or entry.name.startswith(".")
                                             for entry in directory.iterdir())
    except OSError:
        return False


def confine(path: Path, out: Optional[Path], in_place: bool, report_dir: Optional[Path]) -> Paths:
    """The resolved, non-overlapping paths of a run, or ``ConfigError`` saying what overlaps."""
    path = Path(path)
    only = None
    if path.is_file():
        only = path.name
        path = path.resolve().parent
    elif not path.is_dir():
        raise ConfigError(f"PATH {path} is not a directory or a file")
    root = path.resolve()
    if in_place and out is not None:
        raise ConfigError("--out and --in-place cannot be used together")
    from ..outputs.tree import default_out_dir  # (imports the engine: not at CLI start-up)

    out_dir = None if in_place else _directory(out if out is not None else default_out_dir(root), "output directory")
    if out_dir is not None and _overlap(out_dir, root):
        raise ConfigError(f"the output directory {out_dir} overlaps PATH {root} (symbolic links resolved); "
                          "choose a directory outside it")
    if report_dir is None:
        report = _directory(DEFAULT_REPORT_DIR, "report directory")
        if _overlap(report, root):
            report = root.with_name(root.name + "-npu-report")
    else:
        report = _directory(report_dir, "report directory")
    if _inside(root, report):
        raise ConfigError(f"the report directory {report} is PATH {root} or above it (symbolic links resolved): it "
                          "would write report.md, report.json and changes.patch among your files; choose a new "
                          "directory (inside PATH is fine: it is left out of the migration)")
    if _inside(report, root) and not _only_ours(report):
        raise ConfigError(f"the report directory {report} is inside PATH {root} and holds other files: it would "
                          "write report.md, report.json and changes.patch among them; choose a new or empty directory")
    if out_dir is not None and _overlap(report, out_dir):
        raise ConfigError(f"the report directory {report} and the output directory {out_dir} overlap; keep them apart")
    return Paths(root, out_dir, report, only)


def cache_overlap(cache_dir: Path, paths: Paths) -> Optional[str]:
    """Why the cache directory may not be used with these paths (None when it may): a cache inside
    PATH or the output would be written into them (and left there after ``--revert``)."""
    cache = Path(os.path.abspath(cache_dir)).resolve()
    for where, what in ((paths.root, "PATH"), (paths.out_dir, "the output directory"),
                        (paths.report_dir, "the report directory")):
        if where is not None and _overlap(cache, where):
            return (f"the cache directory {cache} overlaps {what} {where} (symbolic links resolved); "
                    "choose one outside it")
    return None


def probe_writable(directory: Path) -> None:
    """Create ``directory`` and a temporary file in it, or raise ``ConfigError`` with the OS error."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        where = exc.filename or directory
        raise ConfigError(f"cannot write to {where}: [Errno {exc.errno}] {exc.strerror or exc}") from exc
