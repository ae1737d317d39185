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
    }


def build(run: RunResult) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "summary": summary(run),
        "files": [{"path": r.path, "status": r.status, "error": r.error} for r in run.files],
        "findings": [_finding(f.to_json()) for f in run.findings],
    }


def _finding(data: dict) -> dict:
    return {key: data[key] for key in FINDING_KEYS}


def render(run: RunResult) -> str:
    return json.dumps(build(run), indent=2) + "\n"
