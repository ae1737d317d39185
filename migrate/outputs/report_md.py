"""``report.md``: the run as a pull-request description a reviewer reads top to bottom.

Rendered from the report.json dict: the summary table (the same counts), the parity result when
there is one, the new files (the vendored helper) and new dependencies (``torch_npu``), the codes
seen with their one-line meaning, "Dependencies and environment" (the compatibility matrix of the
declared packages and the launcher settings found), "Needs attention" (the sites that were not
migrated grouped by their advice: code, plan and what to do, each advice once with its sites; then
the file errors), the rewritten sites per file with their fix safety, and the sites kept as they are
by ``# npu-migrate: ignore`` comments.

A pull request's body holds at most 65,536 characters, so the page stays under ``MAX_CHARS``: on a
large repository the rewrites are listed per file and message, then counted per file, then only
per code, and the lists of sites (and of compatible packages) are shortened ("... and 40 more"),
always saying that report.html (and report.json) hold every site.
"""

from __future__ import annotations

from collections import Counter
from itertools import groupby
from typing import Dict, List, Optional, Tuple

from .. import diagnostics
from ..findings import NUMERICS_CHANGING, SAFE
from . import parity_result
from .codes import catalogue
from .report_json import is_site, location

MAX_CHARS = 60_000  # GitHub's pull-request body limit is 65,536; room for a note or a template
SAFETY_NOTE = {SAFE: "safe", NUMERICS_CHANGING: "numerics-changing: prove it with `migrate parity`"}
EVERY_SITE = "report.html and report.json list every site"
# (how rewrites are listed, sites listed per advice); each level is shorter than the one before.
# Rewrites: "sites" one a line, "lines" per file and message with their lines, "files" one line a
# file with its counts per code, "none" only the counts (the Diagnostics table)
DETAIL_LEVELS = (("sites", 1000), ("lines", 1000), ("lines", 20), ("files", 20), ("files", 5), ("none", 5),
                 ("none", 0))
TORCH_NPU_INSTALL = ("install `torch-npu` (PyPI) of the release that matches your torch, on a machine with "
                     "Ascend's CANN toolkit")


def _cell(text) -> str:
    return str(text or "").replace("|", "\\|").replace("\n", " ")


def _site(f: dict) -> str:
    return f"`{location(f)}`"


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


def dependencies_section(report: dict, limit: int = 1000) -> List[str]:
    """"Dependencies and environment": the package matrix and the launcher settings. Every package
    with a finding or a status other than compatible is listed; of the rest and of the settings at
    most ``limit`` rows (report.md's size cap)."""
    section = report.get("dependencies") or {}
    packages, environment = section.get("packages", []), section.get("environment", [])
    if not (packages or environment):
        return []
    out = ["## Dependencies and environment", ""]
    if packages:
        flagged = [row for row in packages if row["codes"] or row["status"] in ("replace", "unsupported")]
        quiet = [row for row in packages if row not in flagged]
        shown = {id(row) for row in flagged + quiet[:limit]}
        out += ["| Package | Status | Declared in | Replacement | Codes |", "|---|---|---|---|---|"]
        for row in (row for row in packages if id(row) in shown):
            where = "<br>".join(_cell(f"`{d['path']}:{d['line']}` `{d['spec']}`") for d in row["declared"])
            out.append(f"| `{row['name']}` | {STATUS_NOTE[row['status']]} | {where} | {_cell(row['replacement'])} "
                       f"| {', '.join(row['codes'])} |")
        if len(quiet) > limit:
            out.append(f"| … and {len(quiet) - limit} more compatible or unlisted packages ({EVERY_SITE}) | | | | |")
        out.append("")
    if environment:
        out += ["| Setting | Where | Action | Becomes | Code |", "|---|---|---|---|---|"]
        out += [f"| `{_cell(e['name'])}` | `{e['path']}:{e['line']}` | {e['action']} | "
                f"{_cell('`' + e['target'] + '`' if e['target'] else '')} | {e['code']} |" for e in environment[:limit]]
        if len(environment) > limit:
            out.append(f"| … and {len(environment) - limit} more settings ({EVERY_SITE}) | | | | |")
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


def _parity(parity: Optional[dict]) -> List[str]:
    if parity is None:
        return []
    rows = parity_result.rows(parity)
    out = [f"## Parity: {parity_result.verdict(parity)}", "",
           f"`migrate parity` on the emulated NPU (backing {parity.get('backing', '?')}): original "
           f"`{parity.get('original', '?')}` vs migrated `{parity.get('migrated', '?')}`.", "",
           "| " + " | ".join(parity_result.COLUMNS) + " |", "|" + "---|" * len(parity_result.COLUMNS)]
    out += ["| " + " | ".join(_cell(row[c]) for c in parity_result.COLUMNS) + " |" for row in rows]
    sites = parity_result.site_rows(parity)
    if sites:
        columns = ["site", *parity_result.run_labels(parity), "status"]
        out += ["", "What ran at each rewritten site:", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        out += ["| " + " | ".join(_cell(row[c]) for c in columns) + " |" for row in sites]
    return out + [""]


def _listed(items: List[str], limit: int, what: str = "more") -> List[str]:
    shown = items[:limit]
    if len(items) > limit:
        shown.append(f"… and {len(items) - limit} {what} ({EVERY_SITE})")
    return shown


def _names(paths: List[str], limit: int) -> str:
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return ", ".join(f"`{p}`" for p in paths[:limit]) + more


def _new_files_and_dependencies(report: dict, limit: int) -> List[str]:
    new_files, dependencies = report.get("new_files") or [], report.get("new_dependencies") or []
    updated = report.get("updated_files") or []
    if not (new_files or updated or dependencies):
        return []
    out = ["## New files and dependencies", ""]
    if new_files:
        out.append(f"- new file{'s' if len(new_files) > 1 else ''} {_names(new_files, limit)}: the helper module "
                   "npu-migrate vendors beside the migrated files (the run-time checks and mask conversions their "
                   "fused rewrites call); in the patch")
    if updated:
        out.append(f"- updated {_names(updated, limit)}: the vendored helper module, upgraded in place (an unedited "
                   "copy from an older npu-migrate, or one without a section the migrated files now call); in the "
                   "patch")
    for dependency in dependencies:
        files = dependency["files"]
        how = f"; {TORCH_NPU_INSTALL}" if dependency["module"] == "torch_npu" else ""
        names = ", ".join(f"`{p}`" for p in files[:limit]) + (f" and {len(files) - limit} more" if len(files) > limit else "")
        out.append(f"- new dependency `{dependency['module']}`, imported by {len(files)} file"
                   f"{'' if len(files) == 1 else 's'} ({names}){how}")
    return out + [""]


def _rewritten(rewritten: List[dict], mode: str, limit: int) -> List[str]:
    if not rewritten:
        return []
    out = ["## Rewritten", ""]
    if mode == "none":
        files = len({f["path"] for f in rewritten})
        return out + [f"{len(rewritten)} sites in {files} files (counted per code under Diagnostics; {EVERY_SITE}).", ""]
    for path, group in groupby(rewritten, key=lambda f: f["path"]):
        sites = list(group)
        if mode == "files":
            counts = Counter(f["code"] for f in sites)
            out.append(f"- `{path}`: {len(sites)} rewrite{'s' if len(sites) > 1 else ''} ("
                       + ", ".join(f"{code} x{n}" for code, n in sorted(counts.items())) + ")")
            continue
        out += [f"### `{path}`", ""]
        if mode == "sites":
            out += [f"- {_site(f)} {f['code']} {f['message']}{_target(f)}{_safety(f)}" for f in sites]
        else:  # one line per code and message, with the lines it applies to
            kinds: Dict[Tuple[str, str], List[dict]] = {}
            for f in sites:
                kinds.setdefault((f["code"], f["message"]), []).append(f)
            for (code, message), same in kinds.items():
                lines = ", ".join(str(f["line"]) for f in same[:limit]) + (" …" if len(same) > limit else "")
                out.append(f"- {code} {message}{_target(same[0])}{_safety(same[0])} — "
                           f"{len(same)} site{'s' if len(same) > 1 else ''} (line{'s' if len(same) > 1 else ''} {lines})")
        out.append("")
    return out + ([""] if mode == "files" else [])


def _attention(reported: List[dict], errors: List[dict], warnings: List[dict], limit: int) -> List[str]:
    if not (reported or errors or warnings):
        return []
    out = ["## Needs attention", ""]
    advice: Dict[Tuple[str, str, str], List[dict]] = {}
    for f in reported:
        fallback = f["fallback"] or {"plan": "manual", "detail": ""}
        advice.setdefault((f["code"], fallback["plan"], fallback["detail"]), []).append(f)
    codes = catalogue()
    for (code, plan, detail), sites in advice.items():
        summary = codes[code].summary if code in codes else ""
        out.append(f"### {code} ({len(sites)} site{'s' if len(sites) > 1 else ''}) — plan: {plan}")
        out.append("")
        if summary:
            out.append(f"*{summary}*")
            out.append("")
        if detail:
            out.append(f"**What to do:** {detail}")
            out.append("")
        messages = Counter(f["message"] for f in sites)
        common = messages.most_common(1)[0][0] if len(messages) == 1 else None
        if common:
            out.append(f"{common}{' (`' + sites[0]['api'] + '`)' if sites[0]['api'] else ''}:")
            out.append("")
        lines = [f"- {_site(f)}" + ("" if common else f" {f['message']}") for f in sites]
        out += _listed(lines, limit) if limit else [f"- {len(sites)} sites ({EVERY_SITE})"]
        out.append("")
    if errors:
        out += ["### Files not processed (left unchanged)", ""]
        out += _listed([f"- `{r['path']}`: {r['error']}" for r in errors], max(limit, 20), "more files")
        out.append("")
    if warnings:
        out += ["### Warnings", ""]
        out += _listed([f"- `{f['path']}`: {f['code']} {f['message']}" for f in warnings], max(limit, 20), "more")
        out.append("")
    return out


def _suppressed(suppressed: List[dict], limit: int) -> List[str]:
    if not suppressed:
        return []
    out = ["## Suppressed (kept as they are by `# npu-migrate: ignore`)", ""]
    out += _listed([f"- {_site(f)} {f['code']} {f['message']}" for f in suppressed], limit) if limit else \
        [f"- {len(suppressed)} sites ({EVERY_SITE})"]
    return out + [""]


def _render(report: dict, parity: Optional[dict], mode: str, limit: int) -> str:
    s, findings = report["summary"], report["findings"]
    out: List[str] = ["# Migration to Ascend NPU (npu-migrate)", "", *_summary_table(s), *_parity(parity),
                      *_new_files_and_dependencies(report, max(limit, 10))]
    if s["by_code"]:
        codes = catalogue()
        out += ["## Diagnostics", "", "| Code | Count | Meaning |", "|---|---:|---|"]
        out += [f"| {code} | {n} | {_cell(codes[code].summary if code in codes else '')} |"
                for code, n in s["by_code"].items()]
        out.append("")
    out += dependencies_section(report, limit)
    rewritten, reported = _by_action(findings, "rewritten"), _by_action(findings, "reported")
    errors = [f for f in report["files"] if f["status"] == "error"]
    warnings = [f for f in findings if f["code"] in diagnostics.WARNINGS]
    suppressed = _by_action(findings, "suppressed")
    if mode != "sites":
        out += [f"*This repository is large: rewrites are counted per file and the lists of sites are "
                f"shortened to fit a pull-request description; {EVERY_SITE}.*", ""]
    out += _attention(reported, errors, warnings, limit)  # what a reviewer must act on comes first
    out += _rewritten(rewritten, mode, max(limit, 10))
    out += _suppressed(suppressed, limit)
    if not (rewritten or reported or errors or warnings or suppressed):
        out += ["Nothing to migrate: no file uses a CUDA-specific or unsupported API.", ""]
    return "\n".join(out)


def render(report: dict, parity: Optional[dict] = None, max_chars: int = MAX_CHARS) -> str:
    """report.md: the most detailed page that fits in ``max_chars`` characters."""
    text = ""
    for mode, limit in DETAIL_LEVELS:
        text = _render(report, parity, mode, limit)
        if len(text) <= max_chars:
            return text
    return _cut(text, max_chars)


def _cut(text: str, max_chars: int) -> str:
    note = f"\n\n… report.md stops here to fit a pull-request description; {EVERY_SITE}.\n"
    cut = text[:max_chars - len(note)]
    return cut[:cut.rfind("\n")] + note
