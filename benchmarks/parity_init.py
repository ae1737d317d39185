"""`migrate run` + `migrate parity init` + `migrate parity` on repositories nobody wrote a harness for,
with no manual edit: the fixture model repositories and real packages installed `--no-deps` into a
scratch directory (never copied into this repository).

    python benchmarks/parity_init.py [--scratch DIR] [--only NAME ...]

Prints one row per repository: the model classes found, the cases written, the rewritten
numerics-changing sites that ran fused at least once over those rewritten (both from parity's
per-site record of the migrated tree),
and the verdict: pass (every case passed), fail, TODO (the spec stops at a named TODO), or what
stopped it. Target: >= 80% of the repositories pass with every rewritten site run; the rest stop
at a named TODO.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from npu_migrate.migrate.findings import NUMERICS_CHANGING, fix_safety

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures" / "models"
# real packages the fused rules were not tuned on (vision, diffusion, LLM, multimodal), and the
# LLM training stacks of benchmarks/corpus.py; (requirement, package folder)
REAL = {
    "vit-pytorch": ("vit-pytorch==1.26.14", "vit_pytorch"),
    "x-transformers": ("x-transformers==2.31.10", "x_transformers"),
    "perceiver-pytorch": ("perceiver-pytorch==0.11.0", "perceiver_pytorch"),
    "denoising-diffusion-pytorch": ("denoising-diffusion-pytorch", "denoising_diffusion_pytorch"),
    "rectified-flow-pytorch": ("rectified-flow-pytorch", "rectified_flow_pytorch"),
    "audiolm-pytorch": ("audiolm-pytorch", "audiolm_pytorch"),
    "litgpt": ("litgpt==0.5.13", "litgpt"),
    "torchtune": ("torchtune==0.6.1", "torchtune"),
    "mistral-inference": ("mistral-inference==1.6.0", "mistral_inference"),
}
# what the packages import at import time, installed --no-deps beside them
DEPENDENCIES = ["einx", "loguru", "beartype", "ema-pytorch", "jaxtyping", "wadler-lindig", "hyper-connections",
                "lightning-utilities", "lightning==2.6.6", "torchmetrics==1.9.0", "omegaconf==2.4.0", "simple-parsing==0.1.7",
                "docstring-parser==0.16", "jsonargparse==4.40.0", "fire==0.7.0", "termcolor==2.5.0", "safetensors",
                "torchao==0.10.0", "sentencepiece==0.2.3", "tiktoken==0.14.0", "mistral-common==1.5.4", "psutil"]


def sh(*args: str, cwd: Optional[Path] = None, env: Optional[dict] = None, timeout: int = 1800) -> Tuple[int, str]:
    done = subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


def install(scratch: Path, only: Optional[List[str]]) -> Dict[str, Path]:
    packages, deps = scratch / "packages", scratch / "deps"
    found = {}
    for name, (requirement, folder) in REAL.items():
        if only and not any(o in name for o in only):
            continue
        if not (packages / folder).is_dir():
            code, output = sh(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(packages),
                              requirement)
            if code:
                print(f"{name}: not installed: {output.strip().splitlines()[-1:]}", file=sys.stderr)
                continue
        found[name] = packages / folder
    if not deps.is_dir():
        sh(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(deps), *DEPENDENCIES)
    return found


def migrate(*args: str, env: dict) -> Tuple[int, str]:
    return sh(sys.executable, "-m", "npu_migrate.migrate", *args, env=env)


def one(name: str, source: Path, work: Path, env: dict) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    original = work / "original" / source.name
    if original.exists():
        shutil.rmtree(original)
    shutil.copytree(source, original, ignore=shutil.ignore_patterns("__pycache__", "parity.yaml"))
    migrated, reports = work / "migrated" / source.name, work / "reports"
    for path in (migrated, reports):
        if path.exists():
            shutil.rmtree(path)
    row = {"repo": name, "classes": 0, "cases": 0, "sites": "-", "verdict": ""}
    code, output = migrate("run", str(original), "--out", str(migrated), "--report-dir", str(reports), "--no-cache",
                           "-q", "--parity-init", env=env)
    spec = reports / "parity.yaml"
    report = json.loads((reports / "report.json").read_text()) if (reports / "report.json").is_file() else {}
    rewritten = [f for f in report.get("findings", []) if f["action"] == "rewritten" and f["safety"] == "numerics-changing"]
    if not spec.is_file():
        row["verdict"] = "no model reaches a site" if rewritten else "nothing rewritten"
        row["sites"] = f"0/{len(rewritten)}"
        return row
    text = spec.read_text()
    row["cases"] = text.count("\n  - name: ")
    row["classes"] = len({line.split(" (")[0] for line in text.splitlines() if ") runs " in line})
    result = reports / "parity.json"
    code, output = migrate("parity", "--spec", str(spec), "--json", str(result), env=env)
    (work / "parity.log").write_text(output)
    todo = [line for line in output.splitlines() if ": TODO" in line]
    if todo:
        row["verdict"] = "TODO: " + todo[0].split(": TODO: ", 1)[-1][:90]
        row["sites"] = f"-/{len(rewritten)}"
        return row
    parity = json.loads(result.read_text()) if result.is_file() else {}
    # parity's per-site record: the numerics-changing sites of the migrated tree, and those whose fused
    # path ran in at least one run (calls that fell back do not count)
    changing = [s for s in parity.get("sites", []) if fix_safety(s["code"], "rewritten") == NUMERICS_CHANGING]
    ran = sum(1 for s in changing if any(r.get("fused", 0) for r in s["runs"].values()))
    row["sites"] = f"{ran}/{len(changing)}"
    if len(changing) != len(rewritten):  # a rewrite that carries no site (an nn.RMSNorm subclass) is not in the record
        row["sites"] += f" (report.json: {len(rewritten)} rewritten)"
    unrun = max(len(changing), len(rewritten)) - ran
    cases = parity.get("cases", [])
    passed = sum(c["verdict"] == "passed" for c in cases)
    if cases and passed == len(cases):
        row["verdict"] = "pass" if not unrun else f"passed, but {unrun} site(s) never ran fused"
    else:
        failed = next((c for c in cases if c["verdict"] != "passed"), {})
        why = "; ".join(failed.get("errors", []))[:120].replace("\n", " ").replace("|", "/")
        missing = re.search(r"original side: .*?ModuleNotFoundError: (No module named '[^']+')", "; ".join(failed.get("errors", [])))
        if missing:  # a dependency of the repository that cannot be installed here: the original does not run
            row["verdict"] = f"original does not import here ({missing.group(1)})"
            return row
        row["verdict"] = f"fail ({passed}/{len(cases)} runs passed: {failed.get('name')} [{failed.get('dtype')}] " \
                         f"{failed.get('verdict')} {why})"
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scratch", type=Path, default=Path("/work/scratch/parity_init"))
    parser.add_argument("--only", nargs="*", default=None)
    options = parser.parse_args()
    repos = {f"fixture {p.name}": p for p in sorted(FIXTURES.iterdir()) if p.is_dir()}
    repos.update(install(options.scratch, options.only))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(options.scratch / "deps"),
                                                                     os.environ.get("PYTHONPATH", "")])))
    rows = []
    for name, source in repos.items():
        if options.only and not any(o in name for o in options.only):
            continue
        row = one(name, source, options.scratch / "work" / name.replace(" ", "-"), env)
        rows.append(row)
        print(f"{row['repo']}: {row['verdict']}", file=sys.stderr, flush=True)
    print("| repo | classes found | cases | sites run / rewritten | verdict |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['repo']} | {row['classes']} | {row['cases']} | {row['sites']} | {row['verdict']} |")
    passed = sum(r["verdict"] == "pass" for r in rows)
    todo = sum(r["verdict"].startswith("TODO") for r in rows)
    print(f"\n{passed}/{len(rows)} repositories pass ({100 * passed / max(len(rows), 1):.0f}%), {todo} stop at a named TODO, "
          f"{len(rows) - passed - todo} other")
    return 0


if __name__ == "__main__":
    sys.exit(main())
