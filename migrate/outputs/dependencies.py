"""The "dependencies and environment" part of the report, built from the run's results: the
compatibility matrix of the packages the repository declares (one row per package: its status in
the package table, its replacement, where it is declared and the codes found there) and the
launcher settings found (one row per finding of an environment code). report.json carries it as
``dependencies``; report.md and report.html render it.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Dict, List

from npu_migrate.migrate.files.codes import DEPENDENCY_CODES, ENVIRONMENT_CODES
from npu_migrate.migrate.findings import PACKAGE_STATUSES

if TYPE_CHECKING:
    from npu_migrate.migrate.runner import RunResult

SEVERITY = {"unlisted": 0, "compatible": 1, "replace": 2, "unsupported": 3}  # a row shows its worst declaration


def build(run: "RunResult", findings: List[dict]) -> dict:
    """``{"packages": [...], "environment": [...]}`` (``findings``: report.json's finding dicts)."""
    codes_at: Dict[tuple, set] = {}
    for f in findings:
        if f["code"] in DEPENDENCY_CODES:
            codes_at.setdefault((f["path"], f["line"], f["api"]), set()).add(f["code"])
    rows: Dict[str, dict] = {}
    for result in run.files:
        for req in result.requirements:
            row = rows.setdefault(req.name, {"name": req.name, "status": req.status, "replacement": req.replacement,
                                             "declared": [], "codes": set()})
            if SEVERITY[req.status] > SEVERITY[row["status"]]:
                row["status"], row["replacement"] = req.status, req.replacement
            row["declared"].append({"path": result.path, "line": req.line, "spec": req.spec, "group": req.group})
            row["codes"] |= codes_at.get((result.path, req.line, req.name), set())
            row["codes"] |= codes_at.get((result.path, req.line, "torch"), set()) if req.name in ("torch", "pytorch") \
                else set()
    packages = [dict(row, codes=sorted(row["codes"])) for _, row in sorted(rows.items())]
    environment = [{"name": f["api"], "code": f["code"], "action": f["action"], "path": f["path"], "line": f["line"],
                    "target": f["target"], "message": f["message"]}
                   for f in findings if f["code"] in ENVIRONMENT_CODES]
    return {"packages": packages, "environment": environment}


def summarize(section: dict) -> dict:
    """The summary's counts of the section."""
    statuses = Counter(row["status"] for row in section["packages"])
    return {"packages_declared": len(section["packages"]),
            "packages_by_status": {status: statuses[status] for status in PACKAGE_STATUSES},
            "environment_sites": len(section["environment"])}
