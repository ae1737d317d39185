"""``report.json`` (schema_version 5): the summary, one entry per file scanned (Python, dependency or
launcher file, its ``kind``), one per finding, and the dependencies and environment section.

The dict built here is the one source of every count and site that a run shows: report.md,
report.sarif, report.html and the CLI's summary line are all rendered from it.

Every finding a rule reports carries ``fallback`` {plan, detail}; the tool's own NPU0xx findings
(a file that does not parse, is not UTF-8, made a rule crash...) carry the error as their message
and ``fallback: null``. ``safety`` says how far a rewrite can be trusted without a parity run
(``safe`` device rewrites, ``numerics-changing`` fused kernels; null for a site not rewritten).
``snippet`` is the site's source line (stripped; null where there is none, e.g. a file error).

``line`` and ``col`` are 1-based, as ruff, flake8, editors and the SARIF count (0 where there is no
line, e.g. a whole-file error); ``cell`` is a notebook's code cell (1-based among its cells; the
line is then the line in that cell), null in a ``.py`` file. ``new_files`` lists the files the
migration adds (the vendored helper module), ``updated_files`` the vendored helpers it upgrades in
place (an unedited copy an older npu-migrate wrote, or one without a section the migrated files now
call), ``new_dependencies`` the modules migrated code imports that it did not before
(``torch_npu``), each with the files that import it.

Schema history: 2 added ``safety``, ``snippet``, the ``suppressed`` action and the summary keys
``files_other``, ``sites_suppressed`` and ``rewrites_by_safety``; 3 made ``col`` 1-based and added
``cell``, ``new_files`` and ``new_dependencies``; 4 added dependency and launcher files (``files``
entries carry their ``kind``; the ``files_*`` counts cover every kind, broken down by
``files_by_kind``), the ``dependencies`` section (``packages``: the compatibility matrix;
``environment``: the launcher settings found) and its summary counts ``packages_declared``,
``packages_by_status`` and ``environment_sites``; 5 added ``updated_files``.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from .. import diagnostics
from ..findings import PYTHON, SAFETIES
from .dependencies import build as build_dependencies
from .dependencies import summarize as dependency_counts

if TYPE_CHECKING:
    from ..findings import FileResult
    from ..runner import RunResult

SCHEMA_VERSION = 5
FINDING_KEYS = ("code", "path", "line", "col", "cell", "message", "api", "action", "safety", "target", "fallback",
                "snippet")
# a top-level name imported on a line (in a notebook's JSON, a source line starts with its quote)
_IMPORTED = re.compile(r"^\s*\"?(?:import|from)\s+([A-Za-z_]\w*)", re.M)


def is_site(finding: dict) -> bool:
    """A site in the code (the tool's whole-file errors are not sites)."""
    return finding["code"] not in diagnostics.TOOL_CODES


def location(finding: dict) -> str:
    """``path:line:col`` (1-based), ``path:cell 3:line:col`` in a notebook, ``path`` for a whole file."""
    if not finding["line"]:
        return finding["path"]
    cell = f"cell {finding['cell']}:" if finding.get("cell") is not None else ""
    return f"{finding['path']}:{cell}{finding['line']}:{finding['col']}"


def summarize(files: List[dict], findings: List[dict], other_files: int, excluded: int = 0,
              dependencies: Optional[dict] = None) -> dict:
    statuses = Counter(f["status"] for f in files)
    actions = Counter(f["action"] for f in findings if is_site(f))
    safeties = Counter(f["safety"] for f in findings if f["safety"])
    return {
        "files_scanned": len(files),
        "files_changed": statuses["changed"],
        "files_unchanged": statuses["unchanged"],
        "files_skipped": statuses["skipped"],
        "files_errored": statuses["error"],
        "files_other": other_files,
        "files_excluded": excluded,
        "sites_rewritten": actions["rewritten"],
        "sites_reported": actions["reported"],
        "sites_suppressed": actions["suppressed"],
        "rewrites_by_safety": {safety: safeties[safety] for safety in SAFETIES},
        "by_code": dict(sorted(Counter(f["code"] for f in findings).items())),
        "files_by_kind": dict(sorted(Counter(f.get("kind", PYTHON) for f in files).items())),
        **dependency_counts(dependencies or {"packages": [], "environment": []}),
    }


def _source_lines(run: "RunResult", result: "FileResult") -> Optional[List[str]]:
    """The file's original lines (split on ``\\n`` as the positions count them), None if unreadable."""
    if result.status == "error":
        return None  # it could not be read or decoded once already
    text = result.original
    if text is None:
        try:
            text = (run.root / result.path).read_bytes().decode("utf-8", "replace")
        except OSError:
            return None
    return text.split("\n")


def _findings(run: "RunResult") -> List[dict]:
    out = []
    for result in run.files:
        source = _source_lines(run, result) if result.findings else None
        for finding in result.findings:
            data = finding.to_json()
            line = finding.line
            data["col"] = finding.col + 1 if line else 0
            data["snippet"] = None if finding.cell is not None else \
                (source[line - 1].strip() if source and 0 < line <= len(source) else None)
            out.append({key: data[key] for key in FINDING_KEYS})
    return out


def build(run: "RunResult", changes: Optional[Sequence] = None) -> dict:
    """The report of ``run``; ``changes`` (``outputs.changes.collect_changes``) names the new and
    upgraded helper files."""
    files = [{"path": r.path, "status": r.status, "error": r.error, "kind": r.kind} for r in run.files]
    findings = _findings(run)
    dependencies = build_dependencies(run, findings)
    return {
        "schema_version": SCHEMA_VERSION,
        "summary": summarize(files, findings, len(run.copied), len(run.excluded), dependencies),
        "files": files,
        "findings": findings,
        "dependencies": dependencies,
        "excluded": [{"path": e.path, "reason": e.reason} for e in run.excluded],
        "written": _written(run),
        "new_files": sorted(c.path for c in changes or () if c.old is None),
        "updated_files": sorted(c.path for c in changes or () if c.helper and c.old is not None),
        "new_dependencies": new_dependencies(run),
    }


def _imported(text: Optional[str]) -> set:
    return set(_IMPORTED.findall(text or ""))


def new_dependencies(run: "RunResult") -> List[dict]:
    """The modules migrated files import that they did not (``torch_npu``), each with those files;
    the standard library, relative imports and the vendored helpers are not dependencies."""
    found: Dict[str, List[str]] = {}
    for result in run.changed:
        for module in sorted(_imported(result.migrated) - _imported(result.original) - set(result.helpers)):
            if module not in getattr(sys, "stdlib_module_names", ()):
                found.setdefault(module, []).append(result.path)
    return [{"module": module, "files": paths} for module, paths in sorted(found.items())]


def _written(run: "RunResult"):
    """What the run wrote: None for --check/--diff; else whether the writing finished,
    the files written and those not written with the reason (and the in-place journal)."""
    outcome = run.written
    if outcome is None:
        return None
    return {"complete": outcome.complete, "journal": outcome.journal,
            "backups": outcome.backups, "files": outcome.written,
            "not_written": [{"path": p, "error": e} for p, e in sorted(outcome.failed.items())]}


def render(report: dict) -> str:
    return json.dumps(report, indent=2) + "\n"
