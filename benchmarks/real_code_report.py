"""Migrate real model code with ``migrate run``, prove it with ``migrate parity``, and print per
family the sites rewritten and reported, the parity figures of every run, and a summary table.

- Hugging Face ``transformers`` (llama, gpt2, bert, mixtral, t5; the installed package): float32,
  bfloat16, AMP bfloat16 and a checkpoint run (a Hugging Face directory written by
  ``save_pretrained`` from a model built with another seed, loaded strictly into the original).
  The same flow as ``tests/real_code/test_transformers_models.py`` (``fixtures/real_code``).
- litgpt and torchtune, installed with ``pip install --no-deps --target`` into a scratch
  directory (never copied into this repository): their package is migrated as a whole and a tiny
  model built from a config (``fixtures/parity/litgpt``, ``fixtures/parity/torchtune``: a spec and
  its harness, outside both trees) runs in float32, bfloat16 and AMP bfloat16.

A family whose migrated code does not run is reported with the error, not left out.

Run: ``python benchmarks/real_code_report.py [--keep DIR] [--scratch DIR] [--install]`` (several
minutes; ``--install`` first pip-installs litgpt, torchtune and their import-time dependencies
into the scratch directory; ``--keep`` leaves the migrated trees, reports and parity JSON in DIR).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.real_code import flow  # noqa: E402
from npu_migrate.migrate.parity import load_spec, run_parity  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = Path("/work/scratch/parity")
# scratch folder -> what pip installs there (--no-deps); "deps" is what litgpt and torchtune import
INSTALLS = {
    "litgpt": ["litgpt==0.5.13"],
    "torchtune": ["torchtune==0.6.1"],
    "deps": ["lightning==2.6.6", "lightning-utilities==0.15.3", "psutil==7.2.2", "torchmetrics==1.9.0",
             "torchao==0.10.0", "datasets==5.2.0", "multiprocess==0.70.19", "dill==0.4.1", "xxhash==4.1.0",
             "pandas==3.1.1", "pyarrow==26.0.1", "omegaconf==2.4.0", "sentencepiece==0.2.3", "tiktoken==0.14.0"],
}
# third-party family -> (the package migrated, the report paths whose sites are listed)
THIRD_PARTY = {
    "litgpt": ("litgpt", ("model.py", "config.py")),
    "torchtune": ("torchtune", ("modules/", "models/llama3/", "utils/_import_guard.py")),
}
CHECKPOINT_SEED = 1  # the checkpoints' weights differ from the seed-0 random init parity uses


# -- transformers -----------------------------------------------------------------------------
def transformers_spec(folder: Path) -> Path:
    """A spec beside HF checkpoints: every case of ``flow.SPEC`` in float32/bfloat16, AMP bfloat16
    and with the checkpoint. The factory refs resolve in the trees (both hold ``factory.py``)."""
    import torch
    from transformers.utils import logging

    from fixtures.real_code import factory

    logging.disable_progress_bar()

    lines = ["cases:"]
    for case in load_spec(flow.SPEC).cases:
        refs = f'factory: "{case.factory}", inputs: "{case.inputs}"'
        torch.manual_seed(CHECKPOINT_SEED)
        getattr(factory, case.factory.attr)().save_pretrained(folder / "checkpoints" / case.name)
        lines += [f"  - {{name: {case.name}, {refs}, dtypes: [float32, bfloat16]}}",
                  f"  - {{name: {case.name}-amp, {refs}, amp: bfloat16}}",
                  f"  - {{name: {case.name}-checkpoint, {refs}, weights: checkpoints/{case.name}}}"]
    spec = folder / "parity.yaml"
    spec.write_text("\n".join(lines) + "\n")
    return spec


def report_transformers(workdir: Path) -> List[dict]:
    migration = flow.migrate_transformers(workdir)
    spec = transformers_spec(workdir / "spec")
    cases = run_parity(spec, original=flow.HERE, migrated=migration.tree).to_json()["cases"]
    (workdir / "transformers-parity.json").write_text(json.dumps(cases, indent=1))
    print(f"transformers {version('transformers')}; migrate run exit code {migration.exit_code}")
    for family in flow.FAMILIES:
        print(f"\n{family}")
        for site in migration.sites(family):
            print(_site(site))
        for case in cases:
            if case["name"].split("-")[0] == family:
                print(_figures(case))
    return [{**case, "family": case["name"].split("-")[0]} for case in cases]


# -- litgpt and torchtune ------------------------------------------------------------------------
def install(scratch: Path) -> None:
    for folder, packages in INSTALLS.items():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(scratch / folder),
                        *packages], check=True)


@contextmanager
def python_path(folder: Path):
    """The third-party packages' dependencies on the workers' sys.path (after their trees)."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), saved) if p)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = saved


def report_third_party(name: str, scratch: Path, workdir: Path) -> List[dict]:
    package, shown = THIRD_PARTY[name]
    installed = scratch / name
    if not (installed / package).is_dir():
        print(f"\n{name}: not installed in {installed} (run with --install)")
        return [{"family": name, "name": name, "dtype": "-", "verdict": "not installed", "passed": False,
                 "errors": [f"not installed in {installed}"], "outputs": [], "op_coverage": {}}]
    source, out, reports = installed / package, workdir / name / "migrated" / package, workdir / name / "report"
    from typer.testing import CliRunner

    from npu_migrate.migrate.cli import app

    result = CliRunner().invoke(app, ["run", str(source), "--out", str(out), "--report-dir", str(reports)])
    findings = json.loads((reports / "report.json").read_text())["findings"]
    with python_path(scratch / "deps"):
        cases = run_parity(ROOT / "fixtures" / "parity" / name / "parity.yaml", original=installed,
                           migrated=out.parent).to_json()["cases"]
    print(f"\n{name} {version_in(installed, name)}; migrate run exit code {result.exit_code}")
    for f in findings:
        if f["path"].startswith(shown):
            where = flow.enclosing(source / f["path"], f["line"])
            print(_site(flow.Site(f["path"], f["line"], where, f["code"], f["action"], f.get("target"), f["message"])))
    for case in cases:
        print(_figures(case))
    return [{**case, "family": name} for case in cases]


def version_in(folder: Path, name: str) -> str:
    found = sorted(folder.glob(f"{name}-*.dist-info"))
    return found[0].name[len(name) + 1:-len(".dist-info")] if found else "?"


# -- printing ----------------------------------------------------------------------------------
def _site(site: flow.Site) -> str:
    target = site.target or "-"
    line = f"  {site.action:<9} {site.code}  {target:<39} {f'{site.file}:{site.line}':<24} {site.where}"
    return line if site.target else f"{line}\n            why: {site.message}"


def _figures(case: dict) -> str:
    verdict = "passed" if case["passed"] else f"FAILED ({case['verdict']})"
    tensors = ", ".join(
        f"{t['name']} cosine {t['cosine'] or float('nan'):.6f} max abs err {t['max_abs_err']:.3g}"
        for t in case["outputs"]
    )
    ran = ", ".join(f"{op} x{n}" for op, n in sorted(case["op_coverage"].get("fused_npu_ops", {}).items())) or "none"
    problems = "; ".join(e.splitlines()[0] for e in case["errors"] + case.get("weight_problems", []))
    where = case.get("raised_in")
    if where:
        problems += f" [raised in {where['module']} at {where['at']}]"
    return f"  parity {case['name']:<22} {case['dtype']:<12} {verdict}: {tensors or problems}\n    fused kernels run: {ran}"


def summary(rows: List[dict]) -> None:
    print(f"\n{'family':<10} {'case':<22} {'run':<13} {'verdict':<14} {'cosine':>9} {'max abs err':>12}  fused kernels run")
    for row in rows:
        outputs = row["outputs"]
        cosine = min((t["cosine"] for t in outputs if t["cosine"] is not None), default=float("nan"))
        abs_err = max((t["max_abs_err"] for t in outputs), default=float("nan"))
        fused = ", ".join(f"{op} x{n}" for op, n in sorted(row["op_coverage"].get("fused_npu_ops", {}).items())) or "-"
        print(f"{row['family']:<10} {row['name']:<22} {row['dtype']:<13} {row['verdict']:<14} {cosine:>9.6f} "
              f"{abs_err:>12.3g}  {fused}")
    passed = sum(row["passed"] for row in rows)
    print(f"\n{passed}/{len(rows)} runs passed")


def report(workdir: Path, scratch: Path) -> bool:
    rows: List[Dict] = report_transformers(workdir)
    for name in THIRD_PARTY:
        rows += report_third_party(name, scratch, workdir)
    summary(rows)
    return all(row["passed"] for row in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="work here (must be empty or absent) and keep the results")
    parser.add_argument("--scratch", type=Path, default=SCRATCH, help=f"where litgpt and torchtune are installed ({SCRATCH})")
    parser.add_argument("--install", action="store_true", help="pip install --no-deps --target them there first")
    args = parser.parse_args()
    if args.install:
        install(args.scratch)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        passed = report(args.keep.resolve(), args.scratch)
        print(f"\nmigrated trees, reports and parity JSON kept in {args.keep}")
        return 0 if passed else 1
    with tempfile.TemporaryDirectory(prefix="real-code-") as tmp:
        return 0 if report(Path(tmp), args.scratch) else 1


if __name__ == "__main__":
    sys.exit(main())
