"""``migrate parity init``: a parity spec and its harness, written for the user from a migration.

From the original tree (read with libcst, never imported) and the migration's report.json: the model
classes whose forward reaches a rewritten numerics-changing site and the top-level models that
contain them (``reach``), a tiny configuration for each (``construct``, ``sizes``), its inputs
(``inputs``), the cases (``plan``), written as ``parity.yaml`` and ``parity_harness.py`` beside
the reports, never into either tree (``write``). What cannot be inferred is a ``TODO`` in the spec,
which ``migrate parity`` refuses with that message.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from ...outputs.atomic import write_atomic
from .plan import Draft, Planner
from .reach import Model, Reach, Site, rewritten_sites
from .source import Tree
from .write import HARNESS_NAME, SPEC_NAME, harness_text, spec_text

MARK = "Written by `migrate parity init`"


class InitError(Exception):
    """Nothing could be written; the message says why and what to do."""


@dataclass
class InitResult:
    spec: Optional[Path]
    harness: Optional[Path]
    models: List[Model] = field(default_factory=list)
    drafts: List[Draft] = field(default_factory=list)
    sites: List[Site] = field(default_factory=list)  # the numerics-changing sites report.json lists as rewritten
    unreached: List[Site] = field(default_factory=list)  # sites no model's forward reaches

    @property
    def todos(self) -> List[str]:
        variants = ("-amp", "-train", "-decode", "-padded")
        return [t for d in self.drafts if not d.name.endswith(variants) for t in d.todos]


_IMPORT = re.compile(r"^\s*(?:import|from)\s+([A-Za-z_]\w*)", re.M)


def _not_installed(tree: Tree) -> List[str]:
    """Top-level packages the tree's files import that are neither the tree's nor installed."""
    names = sorted({m for path in tree.files for m in _IMPORT.findall((tree.root / path).read_text(encoding="utf-8",
                                                                                                   errors="replace"))})
    local = {p.split("/")[0].removesuffix(".py") for p in tree.files} | {tree.root.name}
    return [n for n in names if n not in local and n not in sys.builtin_module_names and not _installed(n)]


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def init_parity(original: Path, migrated: Path, report_dir: Path, force: bool = False) -> InitResult:
    original, migrated, report_dir = (Path(p).resolve() for p in (original, migrated, report_dir))
    for side, tree in (("original", original), ("migrated", migrated)):
        if not tree.is_dir():
            raise InitError(f"the {side} tree {tree} is not a directory")
        if _inside(report_dir, tree):
            raise InitError(f"the spec would be written into the {side} tree ({report_dir} is inside {tree}); "
                            "give --report-dir outside both trees")
    report_path = report_dir / "report.json"
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InitError(f"no report.json in {report_dir}: run `migrate run {original}` first "
                        "(or give the directory its reports went to with --report-dir)") from None
    except (OSError, ValueError) as exc:
        raise InitError(f"{report_path}: cannot read the migration's report: {exc}") from None
    sites = rewritten_sites(report)
    tree = Tree.read(original, [f["path"] for f in report.get("files", []) if f.get("status") != "error"])
    reach = Reach(tree, sites)
    models = reach.models()
    result = InitResult(None, None, models, sites=sites, unreached=reach.unreached(models))
    if not models:
        return result
    planner = Planner(tree, reach)
    result.drafts = planner.plan(models)
    spec, harness = report_dir / SPEC_NAME, report_dir / HARNESS_NAME
    for path in (spec, harness):
        if path.exists() and not force and MARK not in path.read_text(encoding="utf-8", errors="replace")[:400]:
            raise InitError(f"{path} exists and was not written by `migrate parity init`: keep it, or pass --force")
    package = original.name if (original / "__init__.py").is_file() else None
    header = [f"{MARK} from {report_path} (edit freely).",
              f"{len(sites)} numerics-changing site(s) rewritten; the cases below run "
              f"{len(sites) - len(result.unreached)} of them.",
              *(f"not reached by any model's forward: {s}" for s in result.unreached),
              *(f"not installed here, imported by the tree: {name} (imported at import time, it gets an empty stand-in)"
                for name in _not_installed(tree)),
              *(f"not written: {d.label} ({d.model.cls.where}), whose sites the cases below run; it needs {t}"
                for d in planner.left_out for t in d.todos),
              "Every value can be changed; a TODO left in stops `migrate parity` with its message.",
              f"Run: migrate parity --spec {spec}"]
    write_atomic(harness, (f"# {MARK}.\n" + harness_text(result.drafts, package)).encode())
    write_atomic(spec, spec_text(result.drafts, original, migrated, report_dir, header).encode())
    result.spec, result.harness = spec, harness
    return result
