"""Migrate the installed Hugging Face ``transformers`` (llama, gpt2, bert, mixtral, t5), run parity
against the migrated copy, and print per family the sites rewritten and reported and the parity
figures. The same flow as ``tests/real_code/test_transformers_models.py`` (``fixtures/real_code``).

Run: ``python benchmarks/real_code_report.py [--keep DIR]`` (a few minutes; ``--keep`` leaves the
migrated tree, changes.patch and report.json in DIR instead of a temporary directory).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.real_code import flow  # noqa: E402


def _site(site: flow.Site) -> str:
    target = site.target or "-"
    line = f"  {site.action:<9} {site.code}  {target:<39} {f'{site.file}:{site.line}':<24} {site.where}"
    return line if site.target else f"{line}\n            why: {site.message}"


def _figures(case: dict) -> str:
    verdict = "passed" if case["passed"] else "FAILED"
    tensors = ", ".join(
        f"{t['name']} cosine {t['cosine'] or float('nan'):.6f} max abs err {t['max_abs_err']:.3g}"
        for t in case["outputs"]
    )
    ran = ", ".join(f"{op} x{n}" for op, n in sorted(flow.fused_ops(case).items())) or "none"
    problems = "; ".join(case["errors"] + case["weight_problems"])
    return f"  parity {case['dtype']:<8} {verdict}: {tensors or problems}\n    fused kernels run: {ran}"


def report(workdir: Path) -> bool:
    migration = flow.migrate_transformers(workdir)
    cases = flow.run_parity(migration).to_json()["cases"]
    print(f"transformers {version('transformers')}; migrate run exit code {migration.exit_code}")
    for family in flow.FAMILIES:
        print(f"\n{family}")
        for site in migration.sites(family):
            print(_site(site))
        for case in cases:
            if case["name"] == family:
                print(_figures(case))
    return migration.exit_code == 0 and all(case["passed"] for case in cases)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="work here (must be empty or absent) and keep the results")
    args = parser.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        passed = report(args.keep.resolve())
        print(f"\nmigrated tree, changes.patch and report.json kept in {args.keep}")
        return 0 if passed else 1
    with tempfile.TemporaryDirectory(prefix="real-code-") as tmp:
        return 0 if report(Path(tmp)) else 1


if __name__ == "__main__":
    sys.exit(main())
