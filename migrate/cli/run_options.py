"""What ``migrate run`` is asked to do (``RunOptions``, the output formats) and the parts of a run that
the normal and the standard-input modes share (the op table, the exit code, the SARIF rendering).
Below ``run`` and ``run_stdin``, which both read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from .. import exitcodes
from .run_paths import ConfigError
from ..limits import Limits


class OutputFormat(str, Enum):
    full = "full"
    concise = "concise"
    json = "json"
    json_lines = "json-lines"
    github = "github"
    sarif = "sarif"


@dataclass
class RunOptions:
    """Everything ``migrate run`` does besides its PATH (``migrate demo`` fills one too)."""

    out: Optional[Path] = None
    in_place: bool = False
    force: bool = False
    report_dir: Optional[Path] = None
    opmap: Sequence[Path] = ()
    select: Optional[List[str]] = None
    ignore: Optional[List[str]] = None
    jobs: Optional[int] = None
    check: bool = False
    diff: bool = False
    statistics: bool = False
    parity: Optional[dict] = None
    limits: Limits = field(default_factory=Limits)
    cache_dir: Optional[Path] = None
    output_format: str = "full"
    quiet: bool = False
    exit_zero: bool = False
    exclude: Optional[object] = None  # config.Patterns: files not to migrate (copied unchanged)
    ignored_in: Optional[Callable[[Path], Tuple[str, ...]]] = None  # per-file-ignores, by absolute path
    stdin_filename: Optional[str] = None
    parity_init: bool = False  # write parity.yaml and its harness with the reports (`migrate parity init`)
    cache_given: bool = False  # --cache-dir was given (a cache dir that overlaps a tree is then an error)
    triage: bool = True  # --no-triage: every candidate file goes to libcst (``migrate.triage``)

    @property
    def writes_tree(self) -> bool:
        return not (self.check or self.diff or self.statistics)

    @property
    def writes_reports(self) -> bool:
        """A normal run writes its reports; ``--check`` too when ``--report-dir`` asks for them (CI)."""
        return self.writes_tree or (self.check and self.report_dir is not None)


class UsageError(Exception):
    pass


def _load_table(opmap):
    from ...opmap import load_table

    try:
        return load_table(opmap)
    except OSError as exc:
        raise ConfigError(f"cannot read op table {exc.filename}: {exc.strerror}") from exc


def _sarif(report: dict, result, patch: str) -> str:
    from ..helpers import is_helper_file
    from ..outputs import report_sarif
    from ..outputs.hunks import parse_patch

    diffs = {d.path: d for d in parse_patch(patch, vendored=is_helper_file)}
    originals = {r.path: r.original for r in result.changed if r.original is not None}
    return report_sarif.render(report, result.root, diffs, originals)


def _exit_code(report: dict, result, changes, options: RunOptions) -> int:
    s = report["summary"]
    code = exitcodes.FILE_ERRORS if s["files_errored"] else exitcodes.OK
    if result.written is not None and result.written.failed:
        code |= exitcodes.FILE_ERRORS
    if options.check and not options.exit_zero:
        code |= exitcodes.WOULD_CHANGE if changes else 0
        code |= exitcodes.UNSUPPORTED if s["sites_reported"] else 0
    return code
