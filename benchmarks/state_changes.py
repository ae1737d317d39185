"""Migrated code against its original through every way parameters and buffers change (issue 18).

For the fixture models (``fixtures/models/*``, ``fixtures/demo``), transformers models built from
tiny configs (``fixtures/real_code``: llama, gpt2, bert, mixtral, t5) and the real packages of
``benchmarks/real_repos.py`` (litgpt, torchtune and mistral-inference, installed by
``benchmarks/corpus.py`` with ``pip install --no-deps --target`` into /work/scratch/corpus, never
copied here; tiny models built by the harnesses in ``fixtures/parity/<package>/``): ``migrate run``,
then ``migrate parity`` in float32 with every state change of ``parity/changes.py`` (``changes:
all``) and training with AdamW in its three implementations (for-loop, ``foreach``, ``fused``; 3
steps each). Printed:

- what a cache keyed on a tensor's identity, version counter or address would see of each change
  and optimizer step (in eager mode and under a dispatch mode, as parity's migrated side runs);
- per target, the sites ``migrate run`` rewrote (file:line, code, kernel) and whether that kernel ran
  in the target's cases (at that site or another one: parity counts kernels, not sites);
- per target and change (and per optimizer): same result (the parity criteria of float32) and the
  max abs error over the outputs after it; the target is 0 differences;
- the per-call cost of the chosen design on the emulator next to the unfused original
  (``benchmarks/derived_state_cost.py``; ``--skip-cost`` leaves it out).

Run: ``python benchmarks/state_changes.py [--workdir DIR] [--only NAME ...] [--skip-cost]`` (about
twenty minutes; wrap it in ``flock /tmp/heavy.lock``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import corpus  # noqa: E402
import derived_state_cost  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from npu_migrate.migrate.cli import app  # noqa: E402
from npu_migrate.migrate.parity import run_parity  # noqa: E402
from npu_migrate.migrate.parity.changes import CHANGES  # noqa: E402

OPTIMIZERS = ("adamw-forloop", "adamw-foreach", "adamw-fused")
FIXTURE_CASES = {  # fixture tree -> (case name, factory, kwargs, inputs, output selector)
    "models/nanogpt": [("nanogpt-manual", "model.py:build_model", "{flash: false}", "model.py:make_inputs", "0"),
                       ("nanogpt-flash", "model.py:build_model", "{}", "model.py:make_inputs", "0")],
    "models/llama_gqa": [("llama-gqa", "model.py:build_model", "{}", "model.py:make_inputs", "logits")],
    "models/bert": [("bert", "model.py:build_model", "{}", "model.py:make_inputs", "logits")],
    "models/mixtral_moe": [("mixtral-moe", "model.py:build_model", "{output_router_logits: true}",
                            "model.py:make_causal_inputs", "logits")],
    "models/gptj": [("gptj", "model.py:build_model", "{}", "model.py:make_inputs", None)],
    "demo": [("demo-tinyllama", "tinyllama.model:build_tiny", "{n_kv_heads: 1}",
              "{tokens: {shape: [2, 16], dtype: int64, low: 0, high: 128}}", None)],
}
PACKAGES = ("litgpt", "torchtune", "mistral_inference")


@dataclass
class Target:
    name: str
    original: Path  # the original side's tree
    migrated: Path  # the migrated side's tree
    spec: Path
    findings: List[dict]
    cases: List[dict] = field(default_factory=list)


def case_line(name: str, factory: str, kwargs: str, inputs: str, output: Optional[str]) -> str:
    selector = f" output: {output}," if output else ""
    return (f"  - {{name: {name}, factory: \"{factory}\", kwargs: {kwargs}, inputs: {inputs},{selector}"
            f" dtypes: [float32], train: {{optimizers: [{', '.join(OPTIMIZERS)}], steps: 3}}, changes: all}}")


def migrate(source: Path, out: Path, reports: Path) -> List[dict]:
    result = CliRunner().invoke(app, ["run", str(source), "--out", str(out), "--report-dir", str(reports), "-j", "2"])
    if not (reports / "report.json").is_file():
        raise RuntimeError(f"migrate run {source} exited {result.exit_code}: {result.output[-2000:]}")
    return json.loads((reports / "report.json").read_text())["findings"]


def fixture_targets(workdir: Path) -> List[Target]:
    targets = []
    for tree, cases in FIXTURE_CASES.items():
        name = tree.split("/")[-1]
        source, out = ROOT / "fixtures" / tree, workdir / name / "migrated"
        findings = migrate(source, out, workdir / name / "report")
        spec = workdir / name / "parity.yaml"
        spec.write_text("cases:\n" + "\n".join(case_line(*case) for case in cases) + "\n")
        targets.append(Target(name, source, out, spec, findings))
    return targets


def transformers_target(workdir: Path) -> Target:
    from fixtures.real_code import flow
    from npu_migrate.migrate.parity import load_spec

    migration = flow.migrate_transformers(workdir / "transformers")
    spec = workdir / "transformers" / "parity.yaml"
    lines = [case_line(c.name, str(c.factory), "{}", f"\"{c.inputs}\"", "logits") for c in load_spec(flow.SPEC).cases]
    spec.write_text("cases:\n" + "\n".join(lines) + "\n")
    return Target("transformers", flow.HERE, migration.tree, spec, migration.report["findings"])


def package_target(name: str, installed: Path, workdir: Path) -> Target:
    out = workdir / name / "migrated" / name
    findings = migrate(installed, out, workdir / name / "report")
    harness = ROOT / "fixtures" / "parity" / name / "harness.py"
    shutil.copy(harness, workdir / name / "harness.py")  # beside the spec, outside both trees
    spec = workdir / name / "parity.yaml"
    spec.write_text("cases:\n" + case_line(name, "harness.py:build", "{}", "\"harness.py:make_inputs\"", None) + "\n")
    return Target(name, installed.parent, out.parent, spec, findings)


@contextmanager
def python_path(folder: Optional[Path]):
    """The packages' import-time dependencies on the workers' sys.path (after their trees)."""
    saved = os.environ.get("PYTHONPATH")
    if folder is not None:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), saved) if p)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def run(target: Target, deps: Optional[Path]) -> None:
    with python_path(deps):
        target.cases = run_parity(target.spec, original=target.original, migrated=target.migrated).to_json()["cases"]


# -- what a cache key would see ------------------------------------------------------------------------
class _Block(torch.nn.Module):
    """Two projections and a causal buffer: ``proj.weight`` (the one ``tie`` ties to ``first.weight``)
    and the buffer are the tensors whose keys are read."""

    def __init__(self):
        super().__init__()
        self.first, self.proj = torch.nn.Linear(8, 8, bias=False), torch.nn.Linear(8, 8, bias=False)
        self.register_buffer("bias", torch.tril(torch.ones(8, 8)))

    def forward(self, x):
        return self.proj(self.first(x)).masked_fill(self.bias == 0, 0.0)


class _Counting(TorchDispatchMode):
    """A do-nothing dispatch mode, as parity's op counter on the migrated side (or a profiler)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _keys(t: torch.Tensor) -> tuple:
    return id(t), t._version, t.data_ptr()


def _moved(before: tuple, after: tuple) -> str:
    return " / ".join("moves" if b != a else "same" for b, a in zip(before, after))


def cache_keys() -> List[str]:
    """Per change of ``parity.changes`` and per AdamW implementation: whether a parameter's and a
    buffer's identity, version counter and address move (what a cache keyed on them would notice),
    in CPU eager mode and under a dispatch mode."""
    lines = ["== what a cache key sees: parameter id / version / address | buffer id / version / address"]
    for mode in ("eager", "dispatch mode"):
        lines.append(f"  {mode}:")
        rows = [(name, change.prepare, change.apply) for name, change in CHANGES.items()]
        for name, options in (("foreach", {"foreach": True}), ("fused", {"fused": True}),
                              ("forloop", {"foreach": False})):
            rows.append((f"AdamW {name} step", None, functools.partial(_adamw_step, options=options)))
        for name, prepare, apply in rows:
            torch.manual_seed(0)
            model = _Block()
            if prepare is not None:
                prepare(model)
            model(torch.randn(8, 8))
            before = (_keys(model.proj.weight), _keys(model.bias))
            with _Counting() if mode == "dispatch mode" else contextlib.nullcontext():
                apply(model)
            after = (_keys(model.proj.weight), _keys(model.bias))
            lines.append(f"    {name:<18} {_moved(before[0], after[0]):<22} | {_moved(before[1], after[1])}")
    return lines


def _adamw_step(model: torch.nn.Module, options: dict) -> bool:
    model(torch.randn(8, 8)).pow(2).mean().backward()
    torch.optim.AdamW(model.parameters(), lr=1e-2, **options).step()
    return True


# -- printing -----------------------------------------------------------------------------------------
def worst(tensors: List[dict]) -> str:
    if not tensors:
        return "n/a"
    same = all(t["passed"] for t in tensors)
    error = max((t.get("max_abs_err") or 0.0) for t in tensors)
    return f"{'same' if same else 'DIFFERS'} {error:.1e}"


def sites(target: Target) -> List[str]:
    ran = set()
    for case in target.cases:
        ran |= set(case.get("op_coverage", {}).get("fused_npu_ops", {}))
    lines = []
    for f in target.findings:
        if f["code"].startswith("NPU3") and f["action"] == "rewritten":
            kernel = (f.get("target") or "").split(".")[-1]
            lines.append(f"    {f['path']}:{f['line']} {f['code']} {kernel}: "
                         f"{'the kernel ran' if kernel in ran else 'the kernel never ran'}")
    return lines


def table(target: Target) -> List[str]:
    columns = list(OPTIMIZERS) + list(CHANGES)
    lines = []
    for case in target.cases:
        if case["errors"] or case["weight_problems"]:
            problems = "; ".join((case["errors"] + case["weight_problems"])[:2]).splitlines()[0][:160]
            lines.append(f"  {case['name']:<16} {case['verdict']}: {problems}")
            continue
        cells = {}
        for optimizer in OPTIMIZERS:
            cells[optimizer] = worst([t for t in case["gradients"] + case["after_step"]
                                      if t["name"].startswith(optimizer + "/")])
        for change in CHANGES:
            cells[change] = "n/a" if change in case["changes_not_applicable"] else worst(
                [t for t in case["after_change"] if t["name"].startswith(change + "/")])
        fused = ", ".join(f"{op} x{n}" for op, n in sorted(case["op_coverage"].get("fused_npu_ops", {}).items()))
        lines.append(f"  {case['name']:<16} forward {worst(case['outputs'])}; fused kernels run: {fused or 'none'}")
        lines += [f"    {column:<16} {cells[column]}" for column in columns]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--only", nargs="*", help="fixtures, transformers, litgpt, torchtune, mistral_inference")
    parser.add_argument("--skip-cost", action="store_true")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="state-changes-"))
    wanted = lambda name: not args.only or name in args.only  # noqa: E731
    print(f"work dir {workdir}; corpus: {corpus.versions()}")
    print("\n".join(cache_keys()))
    targets: List[tuple] = []
    if wanted("fixtures"):
        targets += [(t, None) for t in fixture_targets(workdir)]
    if wanted("transformers"):
        targets.append((transformers_target(workdir), None))
    packages = [name for name in PACKAGES if wanted(name)]
    if packages:
        installed, deps = corpus.repos(), corpus.dependencies()
        targets += [(package_target(name, installed[name], workdir), deps) for name in packages]
    differences = 0
    for target, deps in targets:
        run(target, deps)
        print(f"\n{target.name}: rewritten sites (whether their kernel ran in this target's cases, at that site"
              " or another: the run records kernels, not sites)")
        print("\n".join(sites(target)) or "    none")
        print("\n".join(table(target)))
        differences += sum(not t["passed"] for c in target.cases
                           for t in c["outputs"] + c["gradients"] + c["after_step"] + c["after_change"])
        differences += sum(bool(c["errors"] or c["weight_problems"]) for c in target.cases)
    print(f"\n{differences} differences (target 0) over {sum(len(t.cases) for t, _ in targets)} cases")
    if not args.skip_cost:
        print("\n" + "\n".join(derived_state_cost.report()))
    return 0 if differences == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
