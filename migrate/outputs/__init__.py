"""What a run writes: the migrated tree or in-place changes, ``changes.patch``, the reports.

(The renderers are imported by the functions that use them: the CLI imports this package at start-up.)

Every report is rendered from one dict (``report_json.build``), so their counts agree: report.json,
report.md, report.sarif and report.html (which shows a parity result too when one is given).
``rebuild_html`` makes the page again from a report directory alone (``migrate report``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, Optional, Union

from .atomic import write_atomic

if TYPE_CHECKING:
    from ..runner import RunResult

PATCH_NAME = "changes.patch"
JSON_NAME, MD_NAME, SARIF_NAME, HTML_NAME = "report.json", "report.md", "report.sarif", "report.html"


class ReportDirError(ValueError):
    """A report directory that ``migrate report`` cannot read."""


def write_reports(report_dir: Path, run: "RunResult", patch: Union[str, Callable[[], str]],
                  report: Optional[dict] = None, parity: Optional[dict] = None, cache=None) -> Dict[str, Path]:
    """Write ``changes.patch`` and the four reports into ``report_dir``; returns their paths.

    ``patch``: its text, or the function that makes it. ``report`` is ``report_json.build(run)`` when
    the caller has it already; ``parity`` the JSON of a parity run, shown on the HTML page. With a
    ``cache`` (``migrate.cache.Cache``), reports made from the same inputs as the ones it recorded for
    this directory, and still on disk byte for byte as written then, are not made again
    (``migrate.outputs.unchanged``: a warm run of an unchanged tree renders nothing).
    """
    from . import report_json, unchanged

    report = report if report is not None else report_json.build(run)
    paths = {name: Path(report_dir) / name for name in (PATCH_NAME, JSON_NAME, MD_NAME, SARIF_NAME, HTML_NAME)}
    inputs = unchanged.inputs(run, report, parity) if cache is not None else None
    if inputs is not None and unchanged.on_disk(cache, report_dir, inputs, paths):
        return paths
    texts = _render(run, patch if isinstance(patch, str) else patch(), report, parity)
    written = {}
    for name, text in texts.items():
        data = text.encode("utf-8", "backslashreplace")  # odd file names
        write_atomic(paths[name], data)
        written[name] = data
    if inputs is not None:
        unchanged.remember(cache, report_dir, inputs, written)
    return paths


def _render(run: "RunResult", patch: str, report: dict, parity: Optional[dict]) -> Dict[str, str]:
    from . import report_html, report_json, report_md, report_sarif
    from ..helpers import is_helper_file
    from .hunks import parse_patch

    diffs = parse_patch(patch, vendored=is_helper_file)
    originals = {r.path: r.original for r in run.changed if r.original is not None}
    return {
        PATCH_NAME: patch,
        JSON_NAME: report_json.render(report),
        MD_NAME: report_md.render(report, parity),
        SARIF_NAME: report_sarif.render(report, run.root, {d.path: d for d in diffs}, originals),
        HTML_NAME: report_html.render(report, diffs, parity),
    }


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReportDirError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc


def read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(_read(path, what))
    except json.JSONDecodeError as exc:
        raise ReportDirError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from exc
    if not isinstance(data, dict):
        raise ReportDirError(f"{path}: {what} must be a JSON object")
    return data


def rebuild_html(report_dir: Path, parity: Optional[dict] = None, out: Optional[Path] = None) -> Path:
    """``report.html`` again from ``report.json`` and ``changes.patch`` in ``report_dir``; with a parity
    result (and no ``out``), ``report.md`` again too, showing it."""
    from . import report_html, report_json
    from ..helpers import is_helper_file
    from .hunks import PatchError, parse_patch

    report_dir = Path(report_dir)
    report = read_json(report_dir / JSON_NAME, "report")
    if report.get("schema_version") != report_json.SCHEMA_VERSION:
        raise ReportDirError(f"{report_dir / JSON_NAME}: schema_version {report.get('schema_version')!r}, this "
                             f"npu-migrate reads {report_json.SCHEMA_VERSION}; run `migrate run` again")
    patch_path = report_dir / PATCH_NAME
    patch = _read(patch_path, "patch")
    try:
        diffs = parse_patch(patch, vendored=is_helper_file)
    except PatchError as exc:
        raise ReportDirError(f"{patch_path}: {exc}") from exc
    target = Path(out) if out is not None else report_dir / HTML_NAME
    write_atomic(target, report_html.render(report, diffs, parity).encode("utf-8"))
    if out is None and parity is not None:  # the pull-request description shows the parity result too
        from . import report_md

        write_atomic(report_dir / MD_NAME, report_md.render(report, parity).encode("utf-8"))
    return target
