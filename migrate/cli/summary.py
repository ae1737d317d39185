"""What ``migrate run`` tells a person: the summary line, the file errors, the ``--check`` listing
and the ``--statistics`` table, all read from the report.json dict (so they match the reports)."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, Sequence

from rich.markup import escape

from npu_migrate.migrate.console import console
from npu_migrate.migrate.findings import ACTIONS
from npu_migrate.migrate.outputs.report_json import is_site

MAX_LISTED = 200  # --check lists at most this many sites (report.md has them all)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _scanned(s: dict) -> str:
    """'12 Python files' or '12 Python files and 3 dependency/launcher files'."""
    kinds = s.get("files_by_kind") or {"python": s["files_scanned"]}
    python = kinds.get("python", 0)
    declared = s["files_scanned"] - python
    return f"{python} Python files" + (f" and {_plural(declared, 'dependency/launcher file')}" if declared else "")


def summary_line(report: dict) -> None:
    s = report["summary"]
    safety = s["rewrites_by_safety"]
    console.print(
        f"{_scanned(s)} scanned ({_plural(s['files_other'], 'other file')}, "
        f"{s.get('files_excluded', 0)} excluded): "
        f"{s['files_changed']} changed, {s['files_unchanged']} unchanged, "
        f"{s['files_skipped']} skipped (nothing to migrate), {s['files_errored']} with errors; "
        f"{s['sites_rewritten']} sites rewritten ({safety['safe']} safe, {safety['numerics-changing']} "
        f"numerics-changing), {s['sites_reported']} need attention, {s['sites_suppressed']} suppressed.",
        soft_wrap=True)


def errors(report: dict) -> None:
    for failed in report["files"]:
        if failed["status"] == "error":
            console.print(f"[red]error:[/red] {escape(failed['error'] or failed['path'])}", soft_wrap=True)


def check_listing(report: dict, changes: Sequence, path: Path) -> None:
    """The files that would change (with their rewrites) and the sites that need attention."""
    rewrites = Counter(f["path"] for f in report["findings"] if f["action"] == "rewritten")
    migrated = {r["path"] for r in report["files"] if r["status"] == "changed"}
    if changes:
        console.print(f"[bold]Would change {_plural(len(changes), 'file')}:[/]", soft_wrap=True)
        for change in changes:
            if change.path in migrated:
                what = _plural(rewrites[change.path], "rewrite")
            else:  # a vendored helper module beside the files that import it
                what = "new helper module" if change.old is None else "helper module updated"
            console.print(f"  {escape(change.path)} ({what})", soft_wrap=True)
    attention = [f for f in report["findings"] if f["action"] == "reported" and is_site(f)]
    if attention:
        console.print(f"[bold]Needs attention ({_plural(len(attention), 'site')}):[/]", soft_wrap=True)
        for f in attention[:MAX_LISTED]:
            plan = f" [plan: {f['fallback']['plan']}]" if f["fallback"] else ""
            console.print(escape(f"  {f['path']}:{f['line']}:{f['col']}: {f['code']} {f['message']}{plan}"),
                          soft_wrap=True, highlight=False)
        if len(attention) > MAX_LISTED:
            console.print(f"  ... and {len(attention) - MAX_LISTED} more (see report.md)", soft_wrap=True)
    if changes:
        console.print(f"Migrate with: migrate run {escape(str(path))} (or --in-place)", soft_wrap=True)


def statistics(report: dict) -> str:
    """One line per code, most frequent first: count, code, per-action counts, summary (like ruff)."""
    from npu_migrate.migrate.outputs.codes import catalogue

    codes = catalogue()
    actions: Dict[str, Counter] = defaultdict(Counter)
    for f in report["findings"]:
        actions[f["code"]][f["action"] if is_site(f) else "error"] += 1
    rows = sorted(actions.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    lines = []
    for code, counts in rows:
        split = ", ".join(f"{counts[a]} {a}" for a in (*ACTIONS, "error") if counts[a])
        summary = codes[code].summary if code in codes else ""
        lines.append(f"{sum(counts.values()):>6}  {code}  {split:<28}  {summary}")
    return "".join(line.rstrip() + "\n" for line in lines)
