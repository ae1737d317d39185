"""``report.json`` (schema_version 3): the summary, one entry per file scanned (Python, dependency or
launcher file, its ``kind``), one per finding, and the dependencies and environment section.

The dict built here is the one source of every count and site that a run shows: report.md,
report.sarif, report.html and the CLI's summary line are all rendered from it.

Every finding a rule reports carries ``fallback`` {plan, detail}; the tool's own NPU0xx findings
(a file that does not parse, is not UTF-8, made a rule crash...) carry the error as their message
and ``fallback: null``. ``safety`` says how far a rewrite can be trusted without a parity run
(``safe`` device rewrites, ``numerics-changing`` fused kernels; null for a site not rewritten).
``snippet`` is the site's source line (stripped; null where there is none, e.g. a file error).

Schema history: 2 added ``safety``, ``snippet``, the ``suppressed`` action and the summary keys
``files_other``, ``sites_suppressed`` and ``rewrites_by_safety``. 3 added dependency and launcher
files (``files`` entries carry their ``kind``; the ``files_*`` counts cover every kind, broken down by
``files_by_kind``), the ``dependencies`` section (``packages``: the compatibility matrix;
``environment``: the launcher settings found) and its summary counts ``packages_declared``,
``packages_by_status`` and ``environment_sites``.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, List, Optional

from npu_migrate.migrate import diagnostics
from npu_migrate.migrate.findings import PYTHON, SAFETIES
from npu_migrate.migrate.outputs.dependencies import build as build_dependencies
from npu_migrate.migrate.outputs.dependencies import summarize as dependency_counts

if TYPE_CHECKING:
    from npu_migrate.migrate.findings import FileResult
    from npu_migrate.migrate.runner import RunResult

SCHEMA_VERSION = 3
FINDING_KEYS = ("code", "path", "line", "col", "message", "api", "action", "safety", "target", "fallback", "snippet")


def is_site(finding: dict) -> bool:
    """A site in the code (the tool's whole-file errors are not sites)."""
    return finding["code"] not in diagnostics.TOOL_CODES


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
            data["snippet"] = source[line - 1].strip() if source and 0 < line <= len(source) else None
            out.append({key: data[key] for key in FINDING_KEYS})
    return out


def build(run: "RunResult") -> dict:
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
    }


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
