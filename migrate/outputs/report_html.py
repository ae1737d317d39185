"""``report.html``: one self-contained review page (inline CSS and JS, no network, works offline).

Rendered from the report.json dict, the parsed ``changes.patch`` and, when given, the JSON of
``migrate parity --json``: the summary (the same counts as report.json), the parity result, the
sites that need attention with their plans, the dependencies and environment (the compatibility
matrix of the declared packages, the launcher settings found), then per file its diff with each
finding beside the line it is about (findings on lines outside the diff are listed above it with
their source line).
Filters by code, action, plan and safety hide and show the findings (``static/report.js``);
the page is complete without JavaScript.
"""

from __future__ import annotations

from collections import Counter
from html import escape
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from .. import __version__
from .codes import catalogue
from .hunks import FileDiff
from . import parity_result
from .report_json import is_site, location

STATIC = Path(__file__).resolve().parent / "static"
NONE = "none"  # the filter value of a finding without a plan or a safety


def _e(value) -> str:
    return escape(str(value if value is not None else ""), quote=True)


def _asset(name: str) -> str:
    return (STATIC / name).read_text(encoding="utf-8")


def _action(f: dict) -> str:
    return f["action"] if is_site(f) else "error"


def _plan(f: dict) -> str:
    return f["fallback"]["plan"] if f["fallback"] else NONE


def _facets(f: dict) -> Dict[str, str]:
    return {"code": f["code"], "action": _action(f), "plan": _plan(f), "safety": f["safety"] or NONE}


def _finding(f: dict, summaries: Dict[str, str], tag: str = "div") -> str:
    facets = _facets(f)
    data = " ".join(f'data-{k}="{_e(v)}"' for k, v in facets.items()) + f' data-id="{f["_id"]}"'
    parts = [f'<span class="code" title="{_e(summaries.get(f["code"], ""))}">{_e(f["code"])}</span>',
             f'<span class="action {facets["action"]}">{_e(facets["action"])}</span>']
    if f["safety"]:
        parts.append(f'<span class="safety {_e(f["safety"])}">{_e(f["safety"])}</span>')
    parts.append(f'<span class="where">{_e(location(f))}</span>')
    parts.append(f'<span class="message">{_e(f["message"])}</span>')
    if f["fallback"]:
        parts.append(f'<div class="plan"><b>plan: {_e(f["fallback"]["plan"])}</b> {_e(f["fallback"]["detail"])}</div>')
    return f'<{tag} class="finding" {data}>{" ".join(parts)}</{tag}>'


def _dependency_cards(s: dict) -> list:
    if "packages_by_status" not in s:  # a schema-2 report
        return []
    kinds = s.get("files_by_kind", {})
    flagged = s["packages_by_status"]["replace"] + s["packages_by_status"]["unsupported"]
    return [("dependency/launcher files scanned", s["files_scanned"] - kinds.get("python", 0), ""),
            ("packages declared", s["packages_declared"], ""),
            ("packages to replace or drop", flagged, "warn" if flagged else ""),
            ("launcher settings", s["environment_sites"], "")]


def _dependencies(report: dict) -> str:
    """The package compatibility matrix and the launcher settings found."""
    section = report.get("dependencies") or {}
    packages, environment = section.get("packages", []), section.get("environment", [])
    if not (packages or environment):
        return ""
    parts = ['<section id="dependencies"><h2>Dependencies and environment</h2>']
    if packages:
        head = "".join(f"<th>{h}</th>" for h in ("package", "status", "declared in", "replacement", "codes"))
        rows = "".join(
            f'<tr class="{_e(row["status"])}"><td><code>{_e(row["name"])}</code></td><td>{_e(row["status"])}</td>'
            f'<td>{"<br>".join(_e(d["path"]) + ":" + str(d["line"]) + " <code>" + _e(d["spec"]) + "</code>" for d in row["declared"])}</td>'
            f'<td>{_e(row["replacement"])}</td><td>{_e(", ".join(row["codes"]))}</td></tr>' for row in packages)
        parts.append(f'<table class="packages"><tr>{head}</tr>{rows}</table>')
    if environment:
        head = "".join(f"<th>{h}</th>" for h in ("setting", "where", "action", "becomes", "code"))
        rows = "".join(f'<tr><td><code>{_e(e["name"])}</code></td><td>{_e(e["path"])}:{e["line"]}</td>'
                       f'<td>{_e(e["action"])}</td><td><code>{_e(e["target"])}</code></td><td>{_e(e["code"])}</td></tr>'
                       for e in environment)
        parts.append(f'<table class="environment"><tr>{head}</tr>{rows}</table>')
    return "".join(parts) + "</section>"


def _summary(s: dict, parity: Optional[dict]) -> str:
    safety = s["rewrites_by_safety"]
    cards = [
        ("Python files scanned", s.get("files_by_kind", {}).get("python", s["files_scanned"]), ""),
        *_dependency_cards(s),
        ("changed", s["files_changed"], ""),
        ("unchanged", s["files_unchanged"], ""), ("skipped (nothing to migrate)", s["files_skipped"], ""),
        ("with errors", s["files_errored"], "bad" if s["files_errored"] else ""),
        ("other files copied", s["files_other"], ""),
        ("sites rewritten", s["sites_rewritten"], ""), ("safe", safety["safe"], "ok"),
        ("numerics-changing", safety["numerics-changing"], "warn"),
        ("need attention", s["sites_reported"], "warn" if s["sites_reported"] else ""),
        ("suppressed", s["sites_suppressed"], ""),
    ]
    if parity is not None:
        cards.append(("parity", "PASS" if parity.get("passed") else "FAIL", "ok" if parity.get("passed") else "bad"))
        if parity.get("proven") is False:
            cards.append(("sites not proven", sum(s.get("status") == "not proven" for s in parity.get("sites", [])), "warn"))
    items = "".join(f'<div class="card {cls}" data-card="{_e(label)}"><div class="value">{_e(value)}</div>'
                    f'<div class="label">{_e(label)}</div></div>' for label, value, cls in cards)
    return f'<section id="summary"><h2>Summary</h2><div class="cards">{items}</div></section>'


def _filters(findings: List[dict], summaries: Dict[str, str]) -> str:
    groups = []
    for facet in ("code", "action", "plan", "safety"):
        counts = Counter(_facets(f)[facet] for f in findings)
        boxes = "".join(
            f'<label title="{_e(summaries.get(value, "") if facet == "code" else "")}">'
            f'<input type="checkbox" data-facet="{facet}" value="{_e(value)}" checked> {_e(value)} '
            f'<span class="count">{n}</span></label>' for value, n in sorted(counts.items()))
        groups.append(f'<fieldset data-group="{facet}"><legend>{facet}</legend>{boxes}</fieldset>')
    shown = f'<p id="shown"><span id="shown-count">{len(findings)}</span> of {len(findings)} findings shown</p>'
    return f'<section id="filters"><h2>Filters</h2>{"".join(groups)}{shown}</section>'


def _attention(findings: List[dict], summaries: Dict[str, str]) -> str:
    rows = [f for f in findings if _action(f) in ("reported", "error")]
    if not rows:
        return ""
    body = "".join(_finding(f, summaries) for f in rows)
    return f'<section id="attention"><h2>Needs attention ({len(rows)})</h2>{body}</section>'


def _diff_rows(diff: FileDiff, at_line: Dict[int, List[dict]], summaries: Dict[str, str]) -> str:
    rows = []
    for hunk in diff.hunks:
        rows.append(f'<tr class="hunk"><td colspan="4">{_e(hunk.header)}</td></tr>')
        for line in hunk.lines:
            notes = at_line.pop(line.old, []) if line.old is not None and line.kind != "+" else []
            cls = {"-": "del", "+": "add", " ": "ctx"}[line.kind]
            rows.append(f'<tr class="{cls}"><td class="ln">{line.old or ""}</td><td class="ln">{line.new or ""}</td>'
                        f'<td class="src"><code>{_e(line.kind + line.text)}</code></td>'
                        f'<td class="notes">{"".join(_finding(f, summaries) for f in notes)}</td></tr>')
    cols = '<colgroup><col class="ln"><col class="ln"><col class="src"><col class="notes"></colgroup>'
    return f'<table class="diff">{cols}{"".join(rows)}</table>'


def _file(path: str, status: str, diff: Optional[FileDiff], findings: List[dict], summaries: Dict[str, str]) -> str:
    at_line: Dict[int, List[dict]] = {}
    for f in findings:  # a notebook's lines are its cells', not the diff's: listed above the diff
        at_line.setdefault(f["line"] if f.get("cell") is None else -1, []).append(f)
    if diff is not None and diff.vendored_lines is not None and not findings:
        return (f'<details class="file vendored" data-path="{_e(path)}" data-findings="0">'
                f'<summary><code>{_e(path)}</code> <span class="status">new file</span> '
                f'<span class="count">vendored helper, {diff.vendored_lines} lines</span></summary>'
                f'<p>The run-time checks the fused rewrites call, written beside the migrated files of this '
                f'package; the same file in every package. Its text is in changes.patch.</p></details>')
    table = _diff_rows(diff, at_line, summaries) if diff else ""
    outside = [f for line in sorted(at_line) for f in at_line[line]]  # the findings no diff line took
    listed = "".join(f'<li>{_finding(f, summaries, "div")}'
                     + (f'<pre class="snippet">{f["line"]}: {_e(f["snippet"])}</pre>' if f["snippet"] else "")
                     + "</li>" for f in outside)
    sites = f'<ul class="sites">{listed}</ul>' if listed else ""
    label = "new file" if diff is not None and diff.new_file else status
    return (f'<details class="file" open data-path="{_e(path)}" data-findings="{len(findings)}">'
            f'<summary><code>{_e(path)}</code> <span class="status">{_e(label)}</span> '
            f'<span class="count">{len(findings)} findings</span></summary>{sites}{table}</details>')


def _files(files: List[dict], findings: List[dict], diffs: Iterable[FileDiff], summaries: Dict[str, str]) -> str:
    by_path: Dict[str, List[dict]] = {}
    for f in findings:
        by_path.setdefault(f["path"], []).append(f)
    diff_of = {d.path: d for d in diffs}
    status = {r["path"]: r["status"] for r in files}
    paths = sorted(set(by_path) | set(diff_of))
    body = "".join(_file(p, status.get(p, "changed"), diff_of.get(p), by_path.get(p, []), summaries) for p in paths)
    return f'<section id="files"><h2>Files ({len(paths)})</h2>{body}</section>'


def _parity(parity: Optional[dict]) -> str:
    if parity is None:
        return ""
    body = []
    for row in parity_result.rows(parity):
        cells = "".join(f'<td class="verdict">{row[c]}</td>' if c == "result" else f"<td>{_e(row[c])}</td>"
                        for c in parity_result.COLUMNS)
        body.append(f'<tr class="{row["result"].lower()}">{cells}</tr>')
    head = "".join(f"<th>{h}</th>" for h in parity_result.COLUMNS)
    verdict = _e(parity_result.verdict(parity))
    return (f'<section id="parity"><h2>Parity: {verdict}</h2><p>original <code>{_e(parity.get("original"))}</code> '
            f'vs migrated <code>{_e(parity.get("migrated"))}</code>, backing {_e(parity.get("backing"))}</p>'
            f'<table class="parity"><tr>{head}</tr>{"".join(body)}</table>{_sites(parity)}</section>')


def _sites(parity: dict) -> str:
    """What ran at each rewritten site, per run: ``ran n/m`` or why the original code ran."""
    rows = parity_result.site_rows(parity)
    if not rows:
        return ""
    columns = ["site", *parity_result.run_labels(parity), "status"]
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join(f'<tr class="{_e(row["status"].replace(" ", "-"))}">' + "".join(f"<td>{_e(row[c])}</td>" for c in columns)
                   + "</tr>" for row in rows)
    return f'<h3>What ran at each rewritten site</h3><table class="parity-sites"><tr>{head}</tr>{body}</table>'



def render(report: dict, diffs: Iterable[FileDiff] = (), parity: Optional[dict] = None) -> str:
    summaries = {code: info.summary for code, info in catalogue().items()}
    findings = [dict(f, _id=i) for i, f in enumerate(report["findings"])]  # a finding shows up to twice
    body = "".join([_summary(report["summary"], parity), _parity(parity), _filters(findings, summaries),
                    _attention(findings, summaries), _dependencies(report),
                    _files(report["files"], findings, diffs, summaries)])
    return ("<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
            f"<title>npu-migrate review</title><style>{_asset('report.css')}</style></head>"
            f'<body><header><h1>Migration to Ascend NPU</h1><p class="tool">npu-migrate {_e(__version__)}</p></header>'
            f"<main>{body}</main><script>{_asset('report.js')}</script></body></html>\n")
