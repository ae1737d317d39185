"""``report.sarif``: the run as SARIF 2.1.0, for GitHub code scanning and other SARIF viewers.

One run; ``tool.driver`` has the version and ``informationUri``. ``tool.driver.rules`` holds every known code (``codes.catalogue()``: id, name, short and
full description, the doc page as help, default level); each finding is a result:

- ``level``: ``error`` for the tool's file errors, ``warning`` for a site that needs attention,
  ``note`` for a site npu-migrate rewrites; a suppressed site carries an ``inSource`` suppression.
- one location: the file relative to ``%SRCROOT%`` (``originalUriBaseIds``), a 1-based region.
  ``%SRCROOT%`` is PATH, or the top of the git work tree that holds PATH, because GitHub reads
  every relative URI from the repository's root (it ignores ``originalUriBaseIds``).
- ``partialFingerprints``: a hash of the code, the path, the site's normalized source line and its
  occurrence index among equal sites, so an alert survives lines moving above it.
- ``fixes`` for a rewritten site: the replacements of the diff hunk(s) that hold its line, and the
  imports the file gains, cut from ``changes.patch`` (character offsets into the original file).
  A notebook's site has none (its offsets would be into the notebook's JSON) and names its cell in
  the message and ``properties`` (the region is the notebook's first line). A long run of changed
  lines that pair up line by line (a generated file whose every line is rewritten) is cut per line,
  so each site gets its own line, not the whole run (which made the file's fixes quadratic in size);
  what every fix of a file reads (its line offsets, its import runs) is made once per file.
- ``properties``: action, safety, plan (and api/target).

GitHub's limits: at most 25,000 results a run (more are dropped, least severe first, and the run
says how many), 1 location a result, at most 20 tags a rule.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from bisect import bisect_left
from collections import Counter
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple
from urllib.parse import quote

from npu_migrate.migrate import HOMEPAGE, __version__
from npu_migrate.migrate.discovery import git_toplevel
from npu_migrate.migrate.helpers import BESIDE, HELPER
from npu_migrate.migrate.outputs.codes import ERROR, NOTE, WARNING, CodeInfo, catalogue
from npu_migrate.migrate.outputs.hunks import FileDiff, Hunk

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "%SRCROOT%"
FINGERPRINT = "npuMigrateSite/v1"
MAX_RESULTS = 25_000  # GitHub code scanning rejects a run with more
SPLIT_LINES = 32  # a run of more changed lines than this is cut per line when its lines pair up
PAIRED = 0.5  # how alike (difflib's quick ratio) a removed line and its added line are to pair up
LEVEL_ORDER = {ERROR: 0, WARNING: 1, NOTE: 2}


def level(finding: dict, info: Optional[CodeInfo]) -> str:
    if info is not None and info.level == ERROR:
        return ERROR
    return NOTE if finding["action"] == "rewritten" else WARNING


def _rule(info: CodeInfo) -> dict:
    family = {"NPU0": "tool", "NPU1": "unsupported", "NPU2": "device", "NPU3": "fused"}.get(info.code[:4], "other")
    page = info.page or f"# {info.code}: {info.summary}\n"
    return {
        "id": info.code,
        "name": info.name,
        "shortDescription": {"text": info.summary},
        "fullDescription": {"text": info.description},
        "help": {"text": page, "markdown": page},
        "defaultConfiguration": {"level": info.level},
        "properties": {"tags": ["npu-migrate", family]},
    }


def normalized(snippet: Optional[str]) -> str:
    return " ".join((snippet or "").split())


def fingerprints(findings: List[dict]) -> List[str]:
    """One stable hash per finding: code, path, normalized source line and occurrence index."""
    seen: Counter = Counter()
    out = []
    for f in findings:
        key = (f["code"], f["path"], normalized(f["snippet"]))
        index = seen[key]
        seen[key] += 1
        out.append(hashlib.sha256("\0".join([*key, str(index)]).encode("utf-8", "surrogateescape")).hexdigest()[:32])
    return out


def _offsets(text: str) -> List[int]:
    """Character offset of the start of each line (1-based line n at index n - 1), plus the end."""
    starts, total = [], 0
    for line in text.split("\n"):
        starts.append(total)
        total += len(line) + 1
    starts.append(total - 1)  # the end of the text (no newline after the last line)
    return starts


_IMPORT_LINE = re.compile(r"^(import [\w.]+|from [\w.]+ import \w+)(\s+as \w+)?(\s+#.*)?$")
_HELPER_IMPORT = set(BESIDE.format(HELPER).splitlines())  # the vendored helper's try/except import


def _is_import(text: str) -> bool:
    return bool(_IMPORT_LINE.match(text)) or text in _HELPER_IMPORT or not text.strip()


def _import_changes(diff: FileDiff) -> List[Tuple[int, list, list]]:
    """The runs of the file's diff that only add top-level imports (``import torch_npu``, the helper):
    every rewrite of the file needs them, so each fix carries them."""
    return [g for hunk in diff.hunks for g in hunk.changes()
            if not g[1] and g[2] and all(_is_import(line.text) for line in g[2])]


class _Cuts:
    """What the fixes of one report are cut from, made once: each changed file's line offsets and
    import runs, and for each long run of changed lines whether its lines pair up (runs live in
    their hunks)."""

    def __init__(self, diffs: Mapping[str, FileDiff], originals: Mapping[str, str]) -> None:
        self.diffs, self.originals = diffs, originals
        self._offsets: Dict[str, List[int]] = {}
        self._imports: Dict[str, List[Tuple[int, list, list]]] = {}
        self._paired: Dict[int, bool] = {}

    def offsets(self, path: str) -> List[int]:
        if path not in self._offsets:
            self._offsets[path] = _offsets(self.originals[path])
        return self._offsets[path]

    def imports(self, path: str) -> List[Tuple[int, list, list]]:
        if path not in self._imports:
            self._imports[path] = _import_changes(self.diffs[path])
        return self._imports[path]

    def pairs_up(self, run: Tuple[int, list, list]) -> bool:
        """Whether each removed line of ``run`` is like the added line it lines up with from the end
        (the added lines in excess, if any, stand before the first)."""
        if id(run) not in self._paired:
            _, removed, added = run
            extra = len(added) - len(removed)
            self._paired[id(run)] = extra >= 0 and all(
                difflib.SequenceMatcher(None, old.text, new.text).quick_ratio() >= PAIRED
                for old, new in zip(removed, added[extra:]))
        return self._paired[id(run)]

    def own_changes(self, line: int, hunks: List[Hunk]) -> List[Tuple[int, list, list]]:
        """The runs of changed lines that belong to the site on ``line``: those that replace it (only
        its own line of a long run that pairs up), else an insertion right below it (a guard added
        in front of a body), else every run of its hunk(s)."""
        groups = [group for hunk in hunks for group in hunk.changes()]
        at = bisect_left([g[0] for g in groups], line + 1) - 1
        own = [g for g in groups[max(at, 0):at + 1] if g[0] <= line < g[0] + max(len(g[1]), 1)]
        if own and len(own[0][1]) > SPLIT_LINES and self.pairs_up(own[0]):
            return [_line_of(own[0], line)]
        return own or [g for g in groups if not g[1] and g[0] == line + 1] or groups

    def fix(self, finding: dict, uri: dict) -> Optional[dict]:
        """The replacements (character offsets into the original) that make the site's rewrite, with
        the imports it needs."""
        path = finding["path"]
        diff = self.diffs.get(path)
        if diff is None or path not in self.originals or not finding["line"] or finding.get("cell") is not None:
            return None
        groups = self.own_changes(finding["line"], diff.hunks_at(finding["line"]))
        if not groups:
            return None
        imports = [g for g in self.imports(path) if all(g[0] != own[0] for own in groups)]
        groups = sorted(imports + groups, key=lambda g: g[0])
        starts = self.offsets(path)
        replacements = []
        for first, removed, added in groups:
            begin = starts[min(first - 1, len(starts) - 1)]
            end = starts[min(first - 1 + len(removed), len(starts) - 1)]
            text = "".join(line.text + ("\n" if line.newline else "") for line in added)
            replacements.append({"deletedRegion": {"charOffset": begin, "charLength": end - begin},
                                 "insertedContent": {"text": text}})
        lines = sorted({first for first, _, _ in groups if all(g[0] != first for g in imports)})
        needs = " and the imports it needs" if imports else ""
        return {"description": {"text": f"npu-migrate's rewrite at line{'s' if len(lines) > 1 else ''} "
                                        f"{', '.join(map(str, lines))}{needs} (changes.patch holds every change of "
                                        "the file)"},
                "artifactChanges": [{"artifactLocation": uri, "replacements": replacements}]}


def _line_of(run: Tuple[int, list, list], line: int) -> Tuple[int, list, list]:
    """The part of a run that pairs up (``_Cuts.pairs_up``) which replaces ``line``: that line and
    its added line (with the added lines in excess, for the run's first line)."""
    first, removed, added = run
    extra, index = len(added) - len(removed), line - first
    return line, removed[index:index + 1], added[0 if index == 0 else index + extra:index + extra + 1]


def _result(finding: dict, codes: Mapping[str, CodeInfo], rule_index: Dict[str, int], fingerprint: str,
            cuts: _Cuts) -> dict:
    info = codes.get(finding["code"])
    uri = {"uri": _uri(finding["path"]), "uriBaseId": SRCROOT}
    cell = finding.get("cell")
    region = {"startLine": max(finding["line"], 1) if cell is None else 1}
    if finding["line"] and cell is None:
        region["startColumn"] = max(finding["col"], 1)
    if finding["snippet"]:
        region["snippet"] = {"text": finding["snippet"]}
    message = finding["message"]
    if cell is not None:  # the region is the notebook's first line: the JSON file's lines are not the cell's
        message = f"cell {cell}, line {finding['line']}, column {finding['col']}: {message}"
    fallback = finding["fallback"]
    if fallback:
        message = f"{message.rstrip('.')}. Plan ({fallback['plan']}): {fallback['detail']}"
    properties = {"action": finding["action"], "safety": finding["safety"],
                  "plan": fallback["plan"] if fallback else None, "api": finding["api"], "target": finding["target"]}
    if cell is not None:
        properties.update(cell=cell, cellLine=finding["line"], cellColumn=finding["col"])
    result = {
        "ruleId": finding["code"],
        "level": level(finding, info),
        "message": {"text": message},
        "locations": [{"physicalLocation": {"artifactLocation": uri, "region": region}}],
        "partialFingerprints": {FINGERPRINT: fingerprint},
        "properties": properties,
    }
    if finding["code"] in rule_index:
        result["ruleIndex"] = rule_index[finding["code"]]
    if finding["action"] == "rewritten":
        fix = cuts.fix(finding, uri)
        if fix:
            result["fixes"] = [fix]
    if finding["action"] == "suppressed":
        result["suppressions"] = [{"kind": "inSource", "justification": "# npu-migrate: ignore comment at the site"}]
    return result


def _uri(path: str) -> str:
    return quote(path, safe="/", errors="surrogateescape")


def source_root(root: Path) -> Tuple[Path, str]:
    """(%SRCROOT% directory, PATH relative to it as a URI prefix: "" or "sub/dir/")."""
    root = Path(root).resolve()
    top = git_toplevel(root)
    top = top.resolve() if top is not None else root
    if top == root or top not in root.parents:
        return root, ""
    return top, root.relative_to(top).as_posix() + "/"


def build(report: dict, root: Path, diffs: Optional[Mapping[str, FileDiff]] = None,
          originals: Optional[Mapping[str, str]] = None) -> dict:
    """The SARIF log of ``report`` (the report.json dict); ``diffs`` (parsed changes.patch) and
    ``originals`` (the changed files' original text), by path relative to PATH, give the fixes."""
    codes = catalogue()
    rules = [_rule(info) for info in codes.values()]
    rule_index = {rule["id"]: i for i, rule in enumerate(rules)}
    base, prefix = source_root(root)
    findings = [dict(f, path=prefix + f["path"]) for f in report["findings"]]
    prints = fingerprints(findings)
    diffs = {prefix + path: diff for path, diff in (diffs or {}).items()}
    originals = {prefix + path: text for path, text in (originals or {}).items()}
    cuts = _Cuts(diffs, originals)
    results = [_result(f, codes, rule_index, fp, cuts) for f, fp in zip(findings, prints)]
    dropped = max(0, len(results) - MAX_RESULTS)
    if dropped:
        results = sorted(results, key=lambda r: LEVEL_ORDER[r["level"]])[:MAX_RESULTS]
    invocation = {"executionSuccessful": report["summary"]["files_errored"] == 0}
    if dropped:
        invocation["toolExecutionNotifications"] = [{
            "level": "warning",
            "message": {"text": f"{dropped} results left out (GitHub accepts at most {MAX_RESULTS} a run; "
                                "the least severe went first); report.json lists every site"}}]
    run = {
        "tool": {"driver": {"name": "npu-migrate", "version": __version__, "semanticVersion": __version__,
                            "informationUri": HOMEPAGE, "rules": rules}},
        "originalUriBaseIds": {SRCROOT: {"uri": base.as_uri() + "/"}},
        "invocations": [invocation],
        "columnKind": "unicodeCodePoints",
        "results": results,
        "properties": {"summary": report["summary"], "resultsLeftOut": dropped},
    }
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def render(report: dict, root: Path, diffs: Optional[Mapping[str, FileDiff]] = None,
           originals: Optional[Mapping[str, str]] = None) -> str:
    return json.dumps(build(report, root, diffs, originals), indent=2) + "\n"
