"""Draw reported findings of real code whose reasons are then checked by hand.
    python benchmarks/reason_sample.py WORKDIR [--count 50] [--seed 20] [--scratch DIR] [--out FILE]

WORKDIR is a ``benchmarks/coverage.py --workdir``: its ``reports/<repo>/report.json``. Every
reported finding of a component family (attention, rotary, RMS norm, gated MLP, router: codes
NPU3xx) is a candidate; each repository's candidates are shuffled with the seed and the sample takes
one from each repository in turn, so that a large repository does not fill it alone. The markdown
written lists per finding the repository, file, line, code, the message and the code around the
line, with a verdict column to fill in after reading the code: "true", or "contradicted" and why.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # noqa: E402

AROUND = 6  # lines of code shown before and after a finding's line


def candidates(report: dict) -> List[dict]:
    codes = set().union(*(family.codes for family in corpus.families()))
    return [f for f in report.get("findings", [])
            if f["action"] == "reported" and f["code"] in codes and f["code"].startswith("NPU3")]


def draw(by_repo: Dict[str, List[dict]], count: int, seed: int) -> List[tuple]:
    rng = random.Random(seed)
    queues = {name: rng.sample(found, len(found)) for name, found in sorted(by_repo.items()) if found}
    drawn = []
    while len(drawn) < count and any(queues.values()):
        for name, queue in queues.items():
            if queue and len(drawn) < count:
                drawn.append((name, queue.pop()))
    return drawn


def excerpt(path: Path, line: int) -> str:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    first, last = max(1, line - AROUND), min(len(lines), line + AROUND)
    return "\n".join(f"{'>' if n == line else ' '}{n:5} {lines[n - 1]}" for n in range(first, last + 1))


def markdown(drawn: List[tuple], sources: Dict[str, Path], seed: int) -> str:
    out = [f"# {len(drawn)} reported findings of real code, drawn with seed {seed}", "",
           "| # | repo | file:line | code | reason | verdict |", "|---|---|---|---|---|---|"]
    for n, (name, f) in enumerate(drawn, 1):
        out.append(f"| {n} | {name} | {f['path']}:{f['line']} | {f['code']} | {f['message'].replace('|', '/')} | |")
    out.append("")
    for n, (name, f) in enumerate(drawn, 1):
        out += [f"## {n}. {name}/{f['path']}:{f['line']} {f['code']}", "", f"> {f['message']}", "",
                "```python", excerpt(sources[name] / f["path"], f["line"]), "```", "", "Verdict: ", ""]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--scratch", type=Path, default=corpus.SCRATCH)
    parser.add_argument("--out", type=Path, help="the markdown (stdout when absent)")
    args = parser.parse_args()
    sources = corpus.repos(args.scratch, install=False)
    by_repo = {}
    for path in sorted((args.workdir / "reports").glob("*/report.json")):
        if path.parent.name in sources:
            by_repo[path.parent.name] = candidates(json.loads(path.read_text()))
    drawn = draw(by_repo, args.count, args.seed)
    text = markdown(drawn, sources, args.seed)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    print(f"{len(drawn)} drawn from {sum(map(len, by_repo.values()))} reported findings in {len(by_repo)} repositories",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
