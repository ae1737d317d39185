"""``report.json`` (schema_version 1): the summary, one entry per Python file, one per finding.

Every finding a rule reports carries ``fallback`` {plan, detail}; the tool's own NPU0xx findings
(a file that does not parse, is not UTF-8, made a rule crash...) carry the error as their message
and ``fallback: null``.
"""

from __future__ import annotations

import json

from npu_migrate.migrate.runner import RunResult

SCHEMA_VERSION = 1
FINDING_KEYS = ("code", "path", "line", "col", "message", "api", "action", "target", "fallback")


def summary(run: RunResult) -> dict:
    return {
        "files_scanned": len(run.files),
        "files_changed": run.count("changed"),
        "files_unchanged": run.count("unchanged"),
        "files_skipped": run.count("skipped"),
        "files_errored": run.count("error"),
        "sites_rewritten": len(run.rewritten),
        "sites_reported": len(run.reported),
        "by_code": run.by_code(),
        "files_copied": len(run.copied),
        "files_excluded": len(run.excluded),
    }


def build(run: RunResult) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "summary": summary(run),
        "files": [{"path": r.path, "status": r.status, "error": r.error} for r in run.files],
        "findings": [_finding(f.to_json()) for f in run.findings],
        "excluded": [{"path": e.path, "reason": e.reason} for e in run.excluded],
        "written": _written(run),
    }


def _written(run: RunResult):
    """What the run wrote: None for --check/--diff; else whether the writing finished,
    the files written and those not written with the reason (and the in-place journal)."""
    outcome = run.written
    if outcome is None:
        return None
    return {"complete": outcome.complete, "journal": outcome.journal,
            "backups": outcome.backups, "files": outcome.written,
            "not_written": [{"path": p, "error": e} for p, e in sorted(outcome.failed.items())]}


def _finding(data: dict) -> dict:
    return {key: data[key] for key in FINDING_KEYS}


def render(run: RunResult) -> str:
    return json.dumps(build(run), indent=2) + "\n"
