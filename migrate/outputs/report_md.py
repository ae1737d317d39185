"""``report.md``: the run as a pull-request description a reviewer reads top to bottom.

Summary table, the codes seen with their one-line meaning, the rewritten sites per file, then
"Needs attention": every site that was not migrated, with its fallback plan, and the file errors.
"""

from __future__ import annotations

from itertools import groupby
from typing import List

from npu_migrate.migrate import diagnostics
from npu_migrate.migrate.findings import Finding
from npu_migrate.migrate.outputs.report_json import summary
from npu_migrate.migrate.runner import RunResult


def _cell(text: str) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def _site(f: Finding) -> str:
    return f"`{f.path}:{f.line}:{f.col}`"


def _target(f: Finding) -> str:
    return f" (`{f.target}`)" if f.target and f.target not in f.message else ""


def render(run: RunResult) -> str:
    s = summary(run)
    out: List[str] = ["# Migration to Ascend NPU (npu-migrate)", ""]
    out += [
        "| | |", "|---|---:|",
        f"| Python files scanned | {s['files_scanned']} |",
        f"| Files changed | {s['files_changed']} |",
        f"| Files unchanged | {s['files_unchanged'] + s['files_skipped']} |",
        f"| Files with errors | {s['files_errored']} |",
        f"| Sites rewritten | {s['sites_rewritten']} |",
        f"| Sites needing attention | {s['sites_reported']} |",
        "",
    ]
    if s["by_code"]:
        summaries = diagnostics.all_codes()
        out += ["## Diagnostics", "", "| Code | Count | Meaning |", "|---|---:|---|"]
        out += [f"| {code} | {n} | {_cell(summaries.get(code, ''))} |" for code, n in s["by_code"].items()]
        out.append("")

    rewritten = run.rewritten
    if rewritten:
        out += ["## Rewritten", ""]
        for path, sites in groupby(rewritten, key=lambda f: f.path):
            out.append(f"### `{path}`")
            out.append("")
            out += [f"- {_site(f)} {f.code} {f.message}" + _target(f) for f in sites]
            out.append("")

    reported, errors = run.reported, run.errors
    if reported or errors:
        out += ["## Needs attention", ""]
    if reported:
        out += ["| Site | Code | API | Problem | Plan | What to do |", "|---|---|---|---|---|---|"]
        for f in reported:
            plan, detail = (f.fallback.plan, f.fallback.detail) if f.fallback else ("manual", "")
            out.append(f"| {_site(f)} | {f.code} | {_cell(f'`{f.api}`' if f.api else '')} | {_cell(f.message)} "
                       f"| {plan} | {_cell(detail)} |")
        out.append("")
    if errors:
        out += ["### Files not processed (left unchanged)", ""]
        out += [f"- `{r.path}`: {r.error}" for r in errors]
        out.append("")
    if not (rewritten or reported or errors):
        out += ["Nothing to migrate: no file uses a CUDA-specific or unsupported API.", ""]
    return "\n".join(out)
