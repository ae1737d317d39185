"""What ``migrate run`` tells a person: the summary line, the file errors, the ``--check`` listing
and the ``--statistics`` table, all read from the report.json dict (so they match the reports).

Each goes to the console it is given: stdout (``console.out``) for the primary output of a human
format, stderr where stdout carries a machine format, the patch or the migrated source."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Sequence

from rich.console import Console
from rich.markup import escape

from .. import diagnostics
from .formats import attention_lines, statistics_rows

MAX_LISTED = 200  # --check lists at most this many sites (report.md has them all)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _scanned(s: dict) -> str:
    """'12 Python files scanned' or '12 Python files scanned, 3 dependency/launcher files'."""
    kinds = s.get("files_by_kind") or {"python": s["files_scanned"]}
    python = kinds.get("python", 0)
    declared = s["files_scanned"] - python
    return f"{python} Python files scanned" + (f", {_plural(declared, 'dependency/launcher file')}" if declared else "")


def summary_line(report: dict, to: Console) -> None:
    s = report["summary"]
    safety = s["rewrites_by_safety"]
    to.print(
        f"{_scanned(s)} ({_plural(s['files_other'], 'other file')}, "
        f"{s.get('files_excluded', 0)} excluded): "
        f"{s['files_changed']} changed, {s['files_unchanged']} unchanged, "
        f"{s['files_skipped']} skipped (nothing to migrate), {s['files_errored']} with errors; "
        f"{s['sites_rewritten']} sites rewritten ({safety['safe']} safe, {safety['numerics-changing']} "
        f"numerics-changing), {s['sites_reported']} need attention, {s['sites_suppressed']} suppressed.",
        soft_wrap=True, markup=False)


def errors(report: dict, to: Console) -> None:
    """The files that could not be processed, then the warnings about files that were (NPU018)."""
    for failed in report["files"]:
        if failed["status"] == "error":
            to.print(f"[red]error:[/red] {escape(failed['error'] or failed['path'])}", soft_wrap=True)
    for finding in report["findings"]:
        if finding["code"] in diagnostics.WARNINGS:
            to.print(f"[yellow]warning:[/yellow] {escape(finding['path'])}: {finding['code']} "
                     f"{escape(finding['message'])}", soft_wrap=True)


def check_listing(report: dict, changes: Sequence, path: Path, output_format: str, to: Console,
                  command: str = "migrate run") -> None:
    """The files that would change (with their rewrites) and what needs attention (sites, file errors)."""
    rewrites = Counter(f["path"] for f in report["findings"] if f["action"] == "rewritten")
    migrated = {r["path"] for r in report["files"] if r["status"] == "changed"}
    if changes:
        to.print(f"[bold]Would change {_plural(len(changes), 'file')}:[/]", soft_wrap=True)
        for change in changes:
            if change.path in migrated:
                what = _plural(rewrites[change.path], "rewrite")
            else:  # a vendored helper module beside the files that import it
                what = "new helper module" if change.old is None else "helper module updated"
            to.print(f"  {escape(change.path)} ({what})", soft_wrap=True)
    listing(report, output_format, to)
    if changes:
        to.print(f"Migrate with: {command} {escape(str(path))} (or --in-place)", soft_wrap=True)


def listing(report: dict, output_format: str, to: Console) -> None:
    """What needs attention, in ``full`` or ``concise`` form."""
    attention = [f for f in report["findings"] if f["action"] == "reported"]
    if not attention:
        return
    to.print(f"[bold]Needs attention ({_plural(len(attention), 'site')}):[/]", soft_wrap=True)
    lines = attention_lines({"findings": attention[:MAX_LISTED]}, output_format)
    for line in lines:
        to.print("  " + line, soft_wrap=True, markup=False)
    if len(attention) > MAX_LISTED:
        to.print(f"  ... and {len(attention) - MAX_LISTED} more (see report.md)", soft_wrap=True)


def statistics(report: dict, as_json: bool = False) -> str:
    """One line per code, most frequent first: count, code, per-action counts, summary (like ruff)."""
    rows = statistics_rows(report)
    if as_json:
        return json.dumps(rows, indent=2) + "\n"
    lines = []
    for row in rows:
        split = ", ".join(f"{n} {a}" for a, n in row["actions"].items())
        lines.append(f"{row['count']:>6}  {row['code']}  {split:<28}  {row['summary']}")
    return "".join(line.rstrip() + "\n" for line in lines)
