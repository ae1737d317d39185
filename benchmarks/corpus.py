"""The corpus of real code the benchmarks migrate: registry packages installed with ``pip install
--no-deps --target`` into a scratch directory (never copied into this repository) and the installed
Hugging Face ``transformers`` models, exercised where pip put them.

``migrate(source, out, report)`` runs ``migrate run`` as a whole process, as a user would;
``family_counts(report)`` reads report.json per component family; ``silent(source, report)``
checks independently of the engine's own residual pass that every component the detectors see
has a finding of its family in report.json (a silent site is a bug).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import libcst as cst

import softmax_modules
from npu_migrate.migrate.context import FileContext
from npu_migrate.migrate.names import NameResolver
from npu_migrate.migrate.positions import positions
from npu_migrate.migrate.residual import FAMILIES
from npu_migrate.opmap import load_table

SCRATCH = Path("/work/scratch/corpus")
# {package folder pip puts under SCRATCH/packages: pinned requirement}, by kind of model code
PACKAGES = {
    # LLM stacks and training frameworks
    "litgpt": "litgpt==0.5.13", "torchtune": "torchtune==0.6.1", "mistral_inference": "mistral-inference==1.6.0",
    "torchtitan": "torchtitan==0.3.0", "megatron": "megatron-core==0.16.1",  # 0.17+ needs Python 3.12
    # vision transformers, CLIP, segmentation
    "vit_pytorch": "vit-pytorch==1.26.11", "timm": "timm==1.0.31", "open_clip": "open-clip-torch==3.3.0",
    "segment_anything": "segment-anything==1.0",
    # speech and diffusion
    "whisper": "openai-whisper==20250625", "diffusers": "diffusers==0.42.1",
    # mixture-of-experts libraries
    "st_moe_pytorch": "st-moe-pytorch==0.1.8", "mixture_of_experts": "mixture-of-experts==0.2.3",
    # rotary and attention reference code
    "rotary_embedding_torch": "rotary-embedding-torch==0.9.1", "x_transformers": "x-transformers==2.31.10",
}
# what the packages import at import time (installed --no-deps into SCRATCH/deps for the import check)
DEPENDENCIES = ["lightning==2.6.6", "lightning-utilities==0.15.3", "psutil==7.2.2", "torchmetrics==1.9.0",
                "torchao==0.10.0", "omegaconf==2.4.0", "sentencepiece==0.2.3", "tiktoken==0.14.0",
                "jsonargparse==4.40.0", "safetensors", "simple-parsing==0.1.7", "docstring-parser==0.16",
                "fire==0.7.0", "termcolor==2.5.0", "mistral-common==1.5.4", "pydantic", "tqdm"]


def dependencies(scratch: Path = SCRATCH, install: bool = True) -> Optional[Path]:
    """The folder with the packages' import-time dependencies (installed --no-deps when missing)."""
    target = scratch / "deps"
    if not target.is_dir() and install:
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                               *DEPENDENCIES], capture_output=True, text=True)
        if done.returncode != 0:
            print(f"could not install the import-time dependencies: {first_error(done.stderr)}", file=sys.stderr)
    return target if target.is_dir() else None


def installed_transformers() -> Path:
    import transformers

    return Path(transformers.__file__).parent


def repos(scratch: Path = SCRATCH, install: bool = True) -> Dict[str, Path]:
    """``{name: package directory}``: the scratch packages (installed first when missing) and
    transformers' models."""
    target = scratch / "packages"
    missing = [requirement for name, requirement in PACKAGES.items() if not (target / name).is_dir()]
    if missing and install:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                        *missing], check=True)
    found = {name: target / name for name in PACKAGES if (target / name).is_dir()}
    found["transformers"] = installed_transformers() / "models"
    return found


@dataclass
class Run:
    name: str
    source: Path
    out: Path
    report_dir: Path
    seconds: float
    exit_code: int
    report: dict = field(default_factory=dict)


def migrate(name: str, source: Path, workdir: Path, *args: str) -> Run:
    """``migrate run SOURCE --out WORKDIR/migrated/<package name>`` (the package keeps its name, so
    the migrated tree imports like the original)."""
    out = workdir / "migrated" / source.name
    report_dir = workdir / "reports" / name
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "npu_migrate.migrate", "run", str(source), "--out", str(out),
                           "--report-dir", str(report_dir), *args], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    report_path = report_dir / "report.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    if not report:
        print(f"{name}: migrate run exited {done.returncode}\n{done.stderr[-2000:]}", file=sys.stderr)
    return Run(name, source, out, report_dir, seconds, done.returncode, report)


def families():
    return FAMILIES


def family_counts(report: dict) -> Dict[str, Counter]:
    """Per family: sites seen (every finding of its codes), fused (rewritten), reported, suppressed,
    and the reported ones that only the residual pass caught."""
    counts: Dict[str, Counter] = {f.name: Counter() for f in families()}
    for finding in report.get("findings", []):
        for family in families():
            if finding["code"] in family.codes and finding["code"].startswith("NPU3"):  # CUDA-only libraries apart
                c = counts[family.name]
                c["seen"] += 1
                c[{"rewritten": "fused", "reported": "reported", "suppressed": "suppressed"}[finding["action"]]] += 1
                if "form seen:" in finding["message"]:
                    c["residual"] += 1
    return counts


def silent(source: Path, report: dict) -> List[Tuple[str, int, str]]:
    """(path, line, family) of each component the detectors see in ``source`` with no finding of
    its family inside the same function in report.json. The detectors are the families' (on the
    dataflow view, in every function that names one of the family's words) and, for attention,
    ``softmax_modules.sites`` (plain libcst, independent of the engine): a softmax module set in
    ``__init__`` and called on q·kᵀ scores, whose function need not name a softmax at all."""
    table = load_table()
    words = set().union(*(f.words for f in families()))
    by_file: Dict[str, List[Tuple[str, int]]] = {}
    for finding in report.get("findings", []):
        by_file.setdefault(finding["path"], []).append((finding["code"], finding["line"]))
    missing = []
    for entry in report.get("files", []):
        if entry["status"] not in ("changed", "unchanged", "skipped"):  # skipped: no rule's trigger in its bytes
            continue
        path = source / entry["path"]
        text = path.read_text(encoding="utf-8", errors="replace")
        if not any(word in text for word in words):
            continue
        try:
            module = cst.parse_module(text)
        except Exception:  # noqa: BLE001 - a file the run reported as unparsable is not a component site
            continue
        ctx = FileContext(entry["path"], module, table, NameResolver(module))
        functions = [n for n in ctx.tree.subtree(module) if isinstance(n, cst.FunctionDef)]
        spans = _spans(module, functions)
        modules = {}
        for func, line in softmax_modules.sites(module) if "Softmax" in text else ():
            modules.setdefault(id(func), line)
        findings = by_file.get(entry["path"], [])
        for family in families():
            for func in functions:
                where = _detected(ctx, module, func, family) or (modules.get(id(func)) if family.name == "attention" else None)
                if where is None:
                    continue
                first, last = spans[id(func)]
                covered = any(code in family.codes and first <= line <= last for code, line in findings)
                if not covered and not _helper_of_covered(ctx, func, functions, spans, family, findings):
                    missing.append((entry["path"], where, family.name))
    return missing


def _detected(ctx, module, func, family) -> Optional[int]:
    """The line of the first component the family's own detector sees in ``func``, None when none."""
    if not ctx.tree.names(func.body) & family.words:
        return None
    detections = [v for v in family.detect(ctx.view(func)) if v.node is not None]
    if not detections:
        return None
    return positions(module, [detections[0].node]).get(id(detections[0].node), (0, 0))[0]


def _spans(module, functions) -> Dict[int, Tuple[int, int]]:
    """(first, last) line of each function: its start from ``positions``, its end by counting lines."""
    starts = positions(module, functions)
    spans = {}
    for func in functions:
        first = starts.get(id(func), (0, 0))[0]
        text = module.code_for_node(func.with_changes(leading_lines=[]))
        spans[id(func)] = (first, first + text.rstrip("\n").count("\n"))
    return spans


def _helper_of_covered(ctx, func, functions, spans, family, findings) -> bool:
    """A helper (``self._norm``, ``rotate_half``) of a function with a finding of the family: the
    rules read helpers where they are called."""
    for caller in functions:
        if caller is not func and func.name.value in ctx.tree.names(caller.body):
            first, last = spans[id(caller)]
            if any(code in family.codes and first <= line <= last for code, line in findings):
                return True
    return False


def versions(scratch: Path = SCRATCH) -> str:
    """The versions pip put in the scratch directory (their dist-info folders), transformers' and torch's."""
    parts = sorted(p.name[:-len(".dist-info")].replace("-", " ", 1).replace("_", "-")
                   for p in (scratch / "packages").glob("*.dist-info"))
    return ", ".join(parts + [f"transformers {version('transformers')}", f"torch {version('torch')}"])


def table(rows: List[List[str]], headers: List[str]) -> str:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def first_error(text: str) -> Optional[str]:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1] if lines else None
