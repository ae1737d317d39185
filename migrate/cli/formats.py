"""``--output-format``: how ``migrate run`` prints its findings on stdout, as ruff's formats do.

- ``full`` (default): each site that needs attention (and each file error) as
  ``path:line:col: CODE message``, its source line and its plan; then the summary.
- ``concise``: one line a site, ``path:line:col: CODE message [plan: ...]``; then the summary.
- ``json``: a JSON array of every finding (report.json's finding objects: 1-based ``line``/``col``,
  ``cell`` in a notebook); ``json-lines``: one such object a line.
- ``github``: GitHub Actions workflow commands (``::warning file=...,line=...,col=...``), which
  annotate the pull request: ``error`` for file errors, ``warning`` for sites that need attention,
  ``notice`` for rewrites (the run's findings; suppressed sites are left out).
- ``sarif``: the SARIF 2.1.0 log (the same as report.sarif).

The human formats list what needs attention (``--check`` adds the files that would change); the
machine formats print every finding and keep stdout to themselves: the summary goes to stderr.
A notebook's sites are located by cell: ``nb.ipynb:cell 3:2:9``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional

FORMATS = ("full", "concise", "json", "json-lines", "github", "sarif")
HUMAN = ("full", "concise")
GITHUB_LEVEL = {"error": "error", "warning": "warning", "note": "notice"}


def is_human(output_format: str) -> bool:
    return output_format in HUMAN


def attention_lines(report: dict, output_format: str) -> List[str]:
    """The sites that need attention and the file errors, in a human format."""
    from ..outputs.report_json import is_site, location

    lines = []
    for f in report["findings"]:
        if f["action"] != "reported":
            continue
        fallback = f["fallback"]
        if output_format == "concise" or not is_site(f):
            plan = f" [plan: {fallback['plan']}]" if fallback else ""
            lines.append(f"{location(f)}: {f['code']} {f['message']}{plan}")
            continue
        lines.append(f"{location(f)}: {f['code']} {f['message']}")
        if f["snippet"]:
            lines.append(f"  {f['line']:>5} | {f['snippet']}")
        if fallback:
            lines.append(f"        = plan ({fallback['plan']}): {fallback['detail']}")
    return lines


def _github_escape(text: str, property_value: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if property_value else text


def github(report: dict, root: Path) -> str:
    """GitHub Actions annotations, paths from the repository's root (as the SARIF's)."""
    from ..outputs.codes import catalogue
    from ..outputs.report_sarif import level, source_root

    _, prefix = source_root(root)
    codes = catalogue()
    out = []
    for f in report["findings"]:
        if f["action"] == "suppressed":
            continue
        kind = GITHUB_LEVEL[level(f, codes.get(f["code"]))]
        where = [f"file={_github_escape(prefix + f['path'], True)}"]
        message = f["message"]
        if f["line"] and f.get("cell") is None:
            where += [f"line={f['line']}", f"col={f['col']}"]
        elif f["line"]:
            message = f"cell {f['cell']}, line {f['line']}, column {f['col']}: {message}"
        if f["fallback"]:
            message += f" Plan ({f['fallback']['plan']}): {f['fallback']['detail']}"
        title = _github_escape(f"npu-migrate {f['code']}", True)
        out.append(f"::{kind} {','.join(where)},title={title}::{_github_escape(message)}")
    return "".join(line + "\n" for line in out)


def machine(output_format: str, report: dict, root: Path, sarif: Optional[str] = None) -> str:
    """The stdout text of a machine format (``sarif``: the rendered log, passed in)."""
    if output_format == "json":
        return json.dumps(report["findings"], indent=2) + "\n"
    if output_format == "json-lines":
        return "".join(json.dumps(f) + "\n" for f in report["findings"])
    if output_format == "github":
        return github(report, root)
    if output_format == "sarif":
        return sarif or ""
    raise ValueError(output_format)


def statistics_rows(report: dict) -> List[Dict]:
    """One row per code, most frequent first: count, per-action counts and the code's summary."""
    from collections import Counter, defaultdict

    from ..findings import ACTIONS
    from ..outputs.codes import catalogue
    from ..outputs.report_json import is_site

    codes = catalogue()
    actions: Dict[str, Counter] = defaultdict(Counter)
    for f in report["findings"]:
        actions[f["code"]][f["action"] if is_site(f) else "error"] += 1
    rows = sorted(actions.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    return [{"code": code, "count": sum(counts.values()),
             "actions": {a: counts[a] for a in (*ACTIONS, "error") if counts[a]},
             "summary": codes[code].summary if code in codes else ""} for code, counts in rows]
