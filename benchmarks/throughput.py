"""Migration throughput against libcst's parse-only throughput on the same files and cores.

    python benchmarks/throughput.py [DIR] [--jobs N] [--sample N] [--rounds N] [--profile N] [--scaling ROUNDS]

DIR defaults to the installed ``transformers/models`` package. Both measurements read every
``.py`` file and use the same number of processes; the migration runs in memory (the runner never
writes, and no tree is written here), so site-packages is never touched. ``--sample N`` takes
every k-th file so that about N files spread over the whole directory are measured. The ratio is
migrate lines/s over parse-only lines/s; the target is at least 50%. ``--profile N`` also runs
the migration of the first N files under cProfile in this process and prints where the time goes.
``--scaling ROUNDS`` measures the parallel speed-up instead: the in-memory migration with
``--jobs 1`` and with ``--jobs N``, alternated ROUNDS times (paired: each pair runs back to back on
the same machine load), printing each pair's ratio by wall and by CPU time (target >= 1.8x for
N = 2).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import List, Sequence

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npu_migrate.migrate.discovery import discover  # noqa: E402
from npu_migrate.migrate.runner import chunked, run  # noqa: E402
from npu_migrate.opmap import load_table  # noqa: E402


def _default_dir() -> Path:
    import transformers

    return Path(transformers.__file__).parent / "models"


def _parse_chunk(root: Path, paths: Sequence[str]) -> int:
    parsed = 0
    for path in paths:
        try:
            cst.parse_module((root / path).read_bytes().decode("utf-8"))
            parsed += 1
        except Exception:
            pass
    return parsed


def parse_only(root: Path, paths: List[str], jobs: int) -> float:
    """Seconds to read and parse every file with ``jobs`` processes (chunked like the runner)."""
    start = time.perf_counter()
    if jobs == 1:
        _parse_chunk(root, paths)
    else:
        chunks = chunked(paths, jobs)
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(_parse_chunk, [root] * len(chunks), chunks))
    return time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--sample", type=int, default=0, metavar="N", help="measure about N files, evenly spread")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile the first N files (jobs 1)")
    parser.add_argument("--scaling", type=int, default=0, metavar="ROUNDS", help="jobs 1 vs jobs N, paired")
    parser.add_argument("--rounds", type=int, default=1, help="parse-only/migrate pairs, alternating the order")
    args = parser.parse_args(argv)

    root = (args.directory or _default_dir()).resolve()
    paths = discover(root).python
    if args.sample:
        paths = paths[::max(1, len(paths) // args.sample)][:args.sample]
    lines = sum((root / p).read_bytes().count(b"\n") for p in paths)  # also warms the page cache
    table = load_table()
    print(f"{root}: {len(paths)} Python files, {lines} lines, {args.jobs} processes")
    if args.scaling:
        _scaling(root, paths, table, args.jobs, args.scaling)
        return

    ratios = []
    for round_ in range(args.rounds):  # alternated: each pair runs back to back on the same machine load
        first_parse = round_ % 2 == 0
        if first_parse:
            parse_s, parse_cpu = _timed(parse_only, root, paths, args.jobs)
        (result, migrate_s), migrate_cpu = _timed(_run_timed, root, paths, table, args.jobs)
        if not first_parse:
            parse_s, parse_cpu = _timed(parse_only, root, paths, args.jobs)
        counts = ", ".join(f"{result.count(s)} {s}" for s in ("changed", "unchanged", "skipped", "error"))
        print(f"round {round_ + 1} ({'parse-only' if first_parse else 'migrate'} first)")
        print(f"migrate:    {lines / migrate_s:12,.0f} lines/s  ({migrate_s:.2f} s, {migrate_cpu:.2f} s CPU; {counts}; "
              f"{len(result.rewritten)} rewritten, {len(result.reported)} reported)")
        print(f"parse-only: {lines / parse_s:12,.0f} lines/s  ({parse_s:.2f} s, {parse_cpu:.2f} s CPU)")
        print(f"ratio:      {parse_s / migrate_s:12.1%}  (target >= 50%; CPU seconds: {parse_cpu / migrate_cpu:.1%}, "
              "less sensitive to other load on shared cores)")
        ratios.append(parse_s / migrate_s)
    if args.rounds > 1:
        print(f"ratio over the rounds: median {statistics.median(ratios):.1%}, min {min(ratios):.1%}, "
              f"max {max(ratios):.1%}")

    if args.profile:
        subset = paths[:args.profile]
        profiler = cProfile.Profile()
        profiler.runcall(run, root, subset, table, jobs=1, isolate=False)
        print(f"\nprofile of the migration of {len(subset)} files, --jobs 1:")
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


def _run_timed(root: Path, paths: List[str], table, jobs: int):
    start = time.perf_counter()
    result = run(root, paths, table, jobs=jobs)
    return result, time.perf_counter() - start


def _timed(function, *args):
    """``function(*args)`` and the CPU seconds it took in this process and its (finished) children."""
    before = sum(_cpu())
    value = function(*args)
    return value, sum(_cpu()) - before


def _cpu() -> tuple:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime


def _scaling(root: Path, paths: List[str], table, jobs: int, rounds: int) -> None:
    """Paired --jobs 1 / --jobs N rounds, by wall time and by CPU time. The CPU figures are what load
    on shared cores distorts least: the work ratio (CPU seconds of --jobs 1 over --jobs N: 1.0 when
    N processes cost nothing extra) and the CPU-time speed-up, --jobs 1's CPU seconds over the wall
    time --jobs N would take on N idle cores (the parent's CPU is the serial part, Amdahl; the
    workers' CPU splits over N). ``cores busy`` below N in the wall figures means other load."""
    ratios, cpu_ratios = [], []
    for i in range(rounds):
        order = [1, jobs] if i % 2 == 0 else [jobs, 1]
        took, cpu = {}, {}
        for n in order:
            before = _cpu()
            start = time.perf_counter()
            run(root, paths, table, jobs=n)
            took[n] = time.perf_counter() - start
            after = _cpu()
            cpu[n] = (after[0] - before[0], after[1] - before[1])
        ratios.append(took[1] / took[jobs])
        parent, workers = cpu[jobs]
        one = sum(cpu[1])
        cpu_ratios.append(one / (parent + workers / jobs))
        print(f"round {i + 1} (--jobs {order[0]} first): --jobs 1 {took[1]:7.2f} s ({one:.2f} s CPU), --jobs {jobs} "
              f"{took[jobs]:7.2f} s ({parent + workers:.2f} s CPU: parent {parent:.2f} s, workers {workers:.2f} s, "
              f"{(parent + workers) / took[jobs]:.2f} cores busy); speed-up wall {ratios[-1]:.2f}x, CPU time "
              f"{cpu_ratios[-1]:.2f}x (target >= 1.8x); work ratio {one / (parent + workers):.2f}")
    for what, values in (("wall", ratios), ("CPU time", cpu_ratios)):
        print(f"speed-up ({what}) over the rounds: median {statistics.median(values):.2f}x, min {min(values):.2f}x, "
              f"max {max(values):.2f}x")


if __name__ == "__main__":
    main()
