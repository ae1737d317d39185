"""``report.md``: the run as a pull-request description a reviewer reads top to bottom.

Rendered from the report.json dict: the summary table (the same counts), the codes seen with their
one-line meaning, "Dependencies and environment" (the compatibility matrix of the declared packages
and the launcher settings found), the rewritten sites per file with their fix safety, "Needs
attention" (every site that was not migrated, with its fallback plan, and the file errors), then
the sites kept as they are by ``# npu-migrate: ignore[...]`` comments.
"""

from __future__ import annotations

from itertools import groupby
from typing import Dict, List

from npu_migrate.migrate.findings import NUMERICS_CHANGING, SAFE
from npu_migrate.migrate.outputs.codes import catalogue
from npu_migrate.migrate.outputs.report_json import is_site

SAFETY_NOTE = {SAFE: "safe", NUMERICS_CHANGING: "numerics-changing: prove it with `migrate parity`"}


def _cell(text) -> str:
    return str(text or "").replace("|", "\\|").replace("\n", " ")


def _site(f: dict) -> str:
    return f"`{f['path']}:{f['line']}:{f['col']}`"


def _target(f: dict) -> str:
    return f" (`{f['target']}`)" if f["target"] and f["target"] not in f["message"] else ""


def _safety(f: dict) -> str:
    return f" — {SAFETY_NOTE[f['safety']]}" if f["safety"] in SAFETY_NOTE else ""


STATUS_NOTE = {"compatible": "compatible", "replace": "replace", "unsupported": "unsupported",
               "unlisted": "not in the package table"}


def _dependency_rows(s: dict) -> List[str]:
    """The summary rows of the dependency and launcher files (absent from a schema-2 report)."""
    if "packages_by_status" not in s:
        return []
    kinds = s.get("files_by_kind", {})
    rows = [f"| Dependency and launcher files scanned | {s['files_scanned'] - kinds.get('python', 0)} |",
            f"| Packages declared | {s['packages_declared']} |"]
    rows += [f"| … {STATUS_NOTE[status]} | {n} |" for status, n in s["packages_by_status"].items()]
    rows.append(f"| Launcher settings found (environment, GPU counts, images) | {s['environment_sites']} |")
    return rows


def dependencies_section(report: dict) -> List[str]:
    """"Dependencies and environment": the package matrix and the launcher settings."""
    section = report.get("dependencies") or {}
    packages, environment = section.get("packages", []), section.get("environment", [])
    if not (packages or environment):
        return []
    out = ["## Dependencies and environment", ""]
    if packages:
        out += ["| Package | Status | Declared in | Replacement | Codes |", "|---|---|---|---|---|"]
        for row in packages:
            where = "<br>".join(_cell(f"`{d['path']}:{d['line']}` `{d['spec']}`") for d in row["declared"])
            out.append(f"| `{row['name']}` | {STATUS_NOTE[row['status']]} | {where} | {_cell(row['replacement'])} "
                       f"| {', '.join(row['codes'])} |")
        out.append("")
    if environment:
        out += ["| Setting | Where | Action | Becomes | Code |", "|---|---|---|---|---|"]
        out += [f"| `{_cell(e['name'])}` | `{e['path']}:{e['line']}` | {e['action']} | "
                f"{_cell('`' + e['target'] + '`' if e['target'] else '')} | {e['code']} |" for e in environment]
        out.append("")
    return out


def _summary_table(s: dict) -> List[str]:
    safety = s["rewrites_by_safety"]
    return [
        "| | |", "|---|---:|",
        f"| Python files scanned | {s.get('files_by_kind', {}).get('python', s['files_scanned'])} |",
        *_dependency_rows(s),
        f"| Files changed | {s['files_changed']} |",
        f"| Files unchanged | {s['files_unchanged']} |",
        f"| Files skipped (nothing to migrate) | {s['files_skipped']} |",
        f"| Files with errors | {s['files_errored']} |",
        f"| Other files (copied unchanged) | {s['files_other']} |",
        f"| Sites rewritten | {s['sites_rewritten']} |",
        f"| … of which safe (device rewrites) | {safety[SAFE]} |",
        f"| … of which numerics-changing (fused kernels) | {safety[NUMERICS_CHANGING]} |",
        f"| Sites needing attention | {s['sites_reported']} |",
        f"| Sites suppressed (`# npu-migrate: ignore`) | {s['sites_suppressed']} |",
        "",
    ]


def _by_action(findings: List[dict], action: str) -> List[dict]:
    return [f for f in findings if f["action"] == action and is_site(f)]


def render(report: dict) -> str:
    s, findings = report["summary"], report["findings"]
    out: List[str] = ["# Migration to Ascend NPU (npu-migrate)", "", *_summary_table(s)]
    if s["by_code"]:
        codes = catalogue()
        out += ["## Diagnostics", "", "| Code | Count | Meaning |", "|---|---:|---|"]
        out += [f"| {code} | {n} | {_cell(codes[code].summary if code in codes else '')} |"
                for code, n in s["by_code"].items()]
        out.append("")
    out += dependencies_section(report)

    rewritten = _by_action(findings, "rewritten")
    if rewritten:
        out += ["## Rewritten", ""]
        for path, sites in groupby(rewritten, key=lambda f: f["path"]):
            out += [f"### `{path}`", ""]
            out += [f"- {_site(f)} {f['code']} {f['message']}{_target(f)}{_safety(f)}" for f in sites]
            out.append("")

    reported = _by_action(findings, "reported")
    errors = [f for f in report["files"] if f["status"] == "error"]
    if reported or errors:
        out += ["## Needs attention", ""]
    if reported:
        out += ["| Site | Code | API | Problem | Plan | What to do |", "|---|---|---|---|---|---|"]
        for f in reported:
            fallback: Dict[str, str] = f["fallback"] or {"plan": "manual", "detail": ""}
            api = f"`{f['api']}`" if f["api"] else ""
            out.append(f"| {_site(f)} | {f['code']} | {_cell(api)} | {_cell(f['message'])} | {fallback['plan']} "
                       f"| {_cell(fallback['detail'])} |")
        out.append("")
    if errors:
        out += ["### Files not processed (left unchanged)", ""]
        out += [f"- `{r['path']}`: {r['error']}" for r in errors]
        out.append("")

    suppressed = _by_action(findings, "suppressed")
    if suppressed:
        out += ["## Suppressed (kept as they are by `# npu-migrate: ignore`)", ""]
        out += [f"- {_site(f)} {f['code']} {f['message']}" for f in suppressed]
        out.append("")
    if not (rewritten or reported or errors or suppressed):
        out += ["Nothing to migrate: no file uses a CUDA-specific or unsupported API.", ""]
    return "\n".join(out)
