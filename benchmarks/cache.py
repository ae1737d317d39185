"""The result cache: a cold run, a warm re-run on the unchanged tree, and a run with one file touched.

    python benchmarks/cache.py [DIR] [--jobs N] [--rounds N]

DIR defaults to the installed ``transformers/models``. Each run is a whole ``migrate run`` process
writing its tree and reports into a temporary directory, with a fresh cache directory per round
(so every round has a real cold run). Prints the wall time of each run and the ratios warm/cold and
touched/cold (target: warm <= 5% of cold), and checks that the reports of the cold and warm runs
are identical. DIR is never written: the touched file is in a copy of one file, not in DIR (the
run takes a copy of the tree).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _default_dir() -> Path:
    import transformers

    return Path(transformers.__file__).parent / "models"


def _run(repo: Path, work: Path, name: str, cache: Path, jobs: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "npu_migrate.migrate", "run", str(repo), "--out", str(work / f"{name}-out"),
                           "--report-dir", str(work / f"{name}-r"), "--cache-dir", str(cache), "--jobs", jobs],
                          capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode not in (0, 16):
        raise SystemExit(f"migrate run failed ({done.returncode}): {done.stderr[-2000:]}")
    return took


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path)
    parser.add_argument("--jobs", default=str(os.cpu_count() or 1))
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    source = (args.directory or _default_dir()).resolve()
    work = Path(tempfile.mkdtemp(prefix="npu-migrate-cache-bench-"))
    try:
        repo = work / "tree"
        shutil.copytree(source, repo, ignore=shutil.ignore_patterns("__pycache__"))
        victim = sorted(repo.rglob("modeling_*.py"))[0]
        print(f"{source}: {sum(1 for _ in repo.rglob('*.py'))} Python files, --jobs {args.jobs}; touched: "
              f"{victim.relative_to(repo)}")
        for round_ in range(args.rounds):
            cache = work / f"cache{round_}"
            cold = _run(repo, work, "cold", cache, args.jobs)
            warm = _run(repo, work, "warm", cache, args.jobs)
            same = (work / "cold-r/report.json").read_bytes() == (work / "warm-r/report.json").read_bytes() and \
                (work / "cold-r/changes.patch").read_bytes() == (work / "warm-r/changes.patch").read_bytes()
            original = victim.read_bytes()
            victim.write_bytes(original + b"\n# touched\n")
            touched = _run(repo, work, "touched", cache, args.jobs)
            victim.write_bytes(original)
            print(f"round {round_ + 1}: cold {cold:7.2f} s   warm {warm:6.2f} s ({warm / cold:6.1%} of cold, target "
                  f"<= 5%)   one file touched {touched:6.2f} s ({touched / cold:6.1%})   reports identical: {same}")
            for name in ("cold", "warm", "touched"):
                shutil.rmtree(work / f"{name}-out", ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
