"""The result cache and the fixed cost of a run: a cold run, a warm re-run on the unchanged tree, a
run with one file touched, and a warm run of one file.

    python benchmarks/cache.py [DIR] [--jobs N] [--rounds N] [--sample N]

DIR defaults to the installed ``transformers/models``; ``--sample N`` copies about N of its Python
files, evenly spread, into the tree measured (0: all). Each run is a whole ``migrate run`` process
writing its tree and reports into a temporary directory, with a fresh cache directory per round
(so every round has a real cold run). The one-file run migrates one file of the tree as PATH, once
to fill the cache and once warm; the warm one is measured. Each warm run is measured twice: into
new output and report directories, and again into the same ones (a re-run as a pre-commit hook or
an editor makes it: the reports of an unchanged tree are left as they are). Prints the wall and
CPU seconds (of the process and its children) of each run, the ratios warm/cold and touched/cold
(target: warm <= 5% of cold), the medians over the rounds with the absolute targets (a warm run
of 150 files <= 0.5 s, of one file <= 0.3 s), and checks that the tree, the patch and report.json
of the cold and warm runs (the re-run's too) are identical. DIR is never written: the touched file
is in the copy.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple


def _default_dir() -> Path:
    import transformers

    return Path(transformers.__file__).parent / "models"


def _run(path: Path, work: Path, name: str, cache: Path, jobs: str) -> Tuple[float, float]:
    """Wall and CPU seconds of one whole ``migrate run`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "npu_migrate.migrate", "run", str(path), "--out", str(work / f"{name}-out"),
                           "--report-dir", str(work / f"{name}-r"), "--cache-dir", str(cache), "--jobs", jobs],
                          capture_output=True, text=True)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 16):
        raise SystemExit(f"migrate run failed ({done.returncode}): {done.stderr[-2000:]}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _same_trees(a: Path, b: Path) -> bool:
    compared = filecmp.dircmp(a, b)
    if compared.left_only or compared.right_only or compared.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, compared.common_files, shallow=False)
    return not mismatch and not errors and all(_same_trees(a / d, b / d) for d in compared.common_dirs)


def _copy(source: Path, repo: Path, sample: int) -> None:
    if not sample:
        shutil.copytree(source, repo, ignore=shutil.ignore_patterns("__pycache__"))
        return
    paths = sorted(p.relative_to(source) for p in source.rglob("*.py") if "__pycache__" not in p.parts)
    for rel in paths[::max(1, len(paths) // sample)][:sample]:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / rel, repo / rel)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path)
    parser.add_argument("--jobs", default=str(os.cpu_count() or 1))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--sample", type=int, default=0, metavar="N", help="about N files, evenly spread (0: all)")
    args = parser.parse_args(argv)
    source = (args.directory or _default_dir()).resolve()
    work = Path(tempfile.mkdtemp(prefix="npu-migrate-cache-bench-"))
    try:
        repo = work / "tree"
        _copy(source, repo, args.sample)
        victim = sorted(repo.rglob("modeling_*.py"))[0]
        count = sum(1 for _ in repo.rglob("*.py"))
        print(f"{source}: {count} Python files, --jobs {args.jobs}; touched and the one-file run: "
              f"{victim.relative_to(repo)}")
        seen: Dict[str, List[Tuple[float, float]]] = {}
        for round_ in range(args.rounds):
            cache = work / f"cache{round_}"
            times = {"cold": _run(repo, work, "cold", cache, args.jobs), "warm": _run(repo, work, "warm", cache, args.jobs)}
            same = all((work / "cold-r" / name).read_bytes() == (work / "warm-r" / name).read_bytes()
                       for name in ("report.json", "changes.patch")) and _same_trees(work / "cold-out", work / "warm-out")
            times["warm re-run"] = _run(repo, work, "warm", cache, args.jobs)
            same = same and all((work / "cold-r" / name).read_bytes() == (work / "warm-r" / name).read_bytes()
                                for name in ("report.json", "changes.patch")) and _same_trees(work / "cold-out",
                                                                                              work / "warm-out")
            original = victim.read_bytes()
            victim.write_bytes(original + b"\n# touched\n")
            times["touched"] = _run(repo, work, "touched", cache, args.jobs)
            victim.write_bytes(original)
            _run(victim, work, "one-cold", cache, args.jobs)
            times["one file warm"] = _run(victim, work, "one-warm", cache, args.jobs)
            times["one file re-run"] = _run(victim, work, "one-warm", cache, args.jobs)
            (cold, cold_cpu), (warm, warm_cpu), (again, again_cpu) = times["cold"], times["warm"], times["warm re-run"]
            (touched, touched_cpu), (one, one_cpu), (one_again, one_again_cpu) = \
                times["touched"], times["one file warm"], times["one file re-run"]
            print(f"round {round_ + 1}: cold {cold:7.2f} s ({cold_cpu:.2f} s CPU)   warm {warm:6.2f} s ({warm_cpu:.2f} s "
                  f"CPU; {warm / cold:6.1%} of cold, target <= 5%)   warm re-run {again:6.2f} s ({again_cpu:.2f} s CPU; "
                  f"{again / cold:6.1%})   one file touched {touched:6.2f} s ({touched_cpu:.2f} s "
                  f"CPU; {touched / cold:6.1%})   one file warm {one:5.2f} s ({one_cpu:.2f} s CPU), re-run "
                  f"{one_again:5.2f} s ({one_again_cpu:.2f} s CPU)   tree and reports identical: {same}")
            for name, value in times.items():
                seen.setdefault(name, []).append(value)
            for name in ("cold", "warm", "touched", "one-cold", "one-warm"):
                shutil.rmtree(work / f"{name}-out", ignore_errors=True)
        median = {name: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for name, v in seen.items()}
        print(f"medians over {args.rounds} rounds: " + ", ".join(f"{name} {w:.2f} s ({c:.2f} s CPU)"
                                                               for name, (w, c) in median.items()))
        print(f"warm run of {count} files: {median['warm'][0]:.2f} s, re-run {median['warm re-run'][0]:.2f} s "
              f"(target <= 0.5 s for 150 files); warm run of one file: {median['one file warm'][0]:.2f} s, re-run "
              f"{median['one file re-run'][0]:.2f} s (target <= 0.3 s)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
