"""What ran at each rewritten site: the per-site record of the vendored helper, joined to the sites.

Every guard ``migrate run`` writes carries its site, ``site="path:line:CODE"`` (the finding that
rewrote it). The helper counts per site the calls that ran the fused kernel and, for each call that
fell back, the first precondition that failed (``npu_glue.site_counts()``). Here:

* ``rewritten_sites(tree)``: every site constant in the migrated tree's code (read from the source,
  so a site whose code never ran is listed too);
* ``take_counts()`` (in the migrated worker): the counts of every loaded copy of the helper (one per
  package directory) summed per site, then reset, so each run (case and dtype) gets its own;
* ``loaded_files(tree)``: the files of the tree the process imported;
* ``SiteRecord``: one site over the runs of a parity spec, with its status: ``proven`` (the fused
  path ran in some run), ``not proven`` (a numerics-changing site whose file was imported but whose
  fused path never ran: the run's PASS says nothing about it) or ``not loaded`` (no run imported
  its file).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List

from npu_migrate.migrate.findings import NUMERICS_CHANGING, fix_safety
from npu_migrate.migrate.outputs.parity_result import ran  # noqa: F401 (one wording for every output)

HELPER_FILE = "npu_glue.py"
# a site constant as the engine writes it: a JSON string "path:line:CODE"
SITE = re.compile(r'\bsite=("(?:[^"\\\n]|\\.)*:\d+:NPU\d{3}")')
PROVEN, NOT_PROVEN, NOT_LOADED = "proven", "not proven", "not loaded"


def split(site: str) -> tuple:
    """``"models/x.py:12:NPU302"`` -> ("models/x.py", 12, "NPU302")."""
    path, line, code = site.rsplit(":", 2)
    return path, int(line), code


def rewritten_sites(tree: Path) -> List[str]:
    """The site constants in the tree's Python files (the helper itself has none), in order."""
    found: Dict[str, None] = {}
    for path in sorted(Path(tree).rglob("*.py")):
        if path.name == HELPER_FILE or any(part.startswith(".") for part in path.relative_to(tree).parts):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for match in SITE.finditer(text):
            found.setdefault(json.loads(match.group(1)))
    return list(found)


def _helpers() -> Iterable:
    for module in list(sys.modules.values()):
        if (getattr(module, "__file__", None) or "").endswith(HELPER_FILE) and hasattr(module, "site_counts"):
            yield module


def take_counts() -> Dict[str, dict]:
    """The per-site counts of every loaded helper copy, summed, then reset to zero."""
    total: Dict[str, dict] = {}
    seen = set()
    for helper in _helpers():
        if id(helper) in seen:
            continue
        seen.add(id(helper))
        for site, counts in helper.site_counts().items():
            into = total.setdefault(site, {"calls": 0, "fused": 0, "fallbacks": {}})
            into["calls"] += counts["calls"]
            into["fused"] += counts["fused"]
            for why, n in counts["fallbacks"].items():
                into["fallbacks"][why] = into["fallbacks"].get(why, 0) + n
        helper.reset_site_counts()
    return total


def reset_counts() -> None:
    for helper in _helpers():
        helper.reset_site_counts()


def loaded_files(tree: Path) -> List[str]:
    """The tree's files that this process imported, relative to the tree, as the sites name them."""
    root = Path(tree).resolve()
    files = set()
    for module in list(sys.modules.values()):
        name = getattr(module, "__file__", None)
        if not name:
            continue
        try:
            files.add(Path(name).resolve().relative_to(root).as_posix())
        except ValueError:
            continue
    return sorted(files)


def _among(path: str, files: Iterable[str]) -> bool:
    """``path`` (relative to the directory ``migrate run`` was given) is one of ``files`` (relative to
    the migrated tree parity runs): equal, or one ends with the other."""
    return any(f == path or f.endswith("/" + path) or path.endswith("/" + f) for f in files)


@dataclass
class SiteRecord:
    site: str
    runs: Dict[str, dict] = field(default_factory=dict)  # run label ("case [dtype]") -> counts
    loaded: bool = False  # some run imported the site's file

    @property
    def path(self) -> str:
        return split(self.site)[0]

    @property
    def line(self) -> int:
        return split(self.site)[1]

    @property
    def code(self) -> str:
        return split(self.site)[2]

    @property
    def fused(self) -> int:
        return sum(r.get("fused", 0) for r in self.runs.values())

    @property
    def status(self) -> str:
        if self.fused:
            return PROVEN
        if not self.loaded and not any(r.get("calls") for r in self.runs.values()):
            return NOT_LOADED
        return NOT_PROVEN if fix_safety(self.code, "rewritten") == NUMERICS_CHANGING else PROVEN

    def to_json(self) -> dict:
        return {"site": self.site, "path": self.path, "line": self.line, "code": self.code, "status": self.status,
                "runs": self.runs}


def records(sites: List[str], runs: Dict[str, tuple]) -> List[SiteRecord]:
    """One record per site (``sites``: the tree's, plus any only a run saw); ``runs``: run label ->
    (that run's counts per site, the files it imported)."""
    every = list(dict.fromkeys([*sites, *(s for counts, _ in runs.values() for s in counts)]))
    out = []
    for site in every:
        record = SiteRecord(site)
        for label, (counts, loaded) in runs.items():
            record.runs[label] = counts.get(site, {"calls": 0, "fused": 0, "fallbacks": {}})
            record.loaded = record.loaded or _among(split(site)[0], loaded)
        out.append(record)
    return out
