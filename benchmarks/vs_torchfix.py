"""End to end against TorchFix 0.7: both tools as whole processes on the same files and cores.

    python benchmarks/vs_torchfix.py [DIR] [--sample N] [--jobs N] [--rounds N]

TorchFix needs libcst < 1.6, so it is installed into a scratch venv (``/work/scratch/torchfix-venv``
or ``$TORCHFIX_VENV``; created with ``pip install torchfix==0.7.0 "libcst<1.6"`` when missing),
never into this project's environment. DIR defaults to the installed ``transformers/models``;
``--sample N`` copies about N of its Python files, evenly spread, into a temporary tree (the
machine has 2 shared cores, and TorchFix takes minutes per 300 files). Each round runs
``migrate run TREE --out ... --no-cache`` (the migrated tree, the patch and the reports written)
and ``torchfix --select ALL TREE`` (checks only), alternating which goes first, and prints the
wall and CPU seconds of both and the ratios TorchFix/migrate of both (target >= 10x), then
their medians over the rounds. On a machine whose
cores are shared, compare the ratios of the rounds: each pair ran back to back on the same load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Tuple

VENV = Path(os.environ.get("TORCHFIX_VENV", "/work/scratch/torchfix-venv"))


def _default_dir() -> Path:
    import transformers

    return Path(transformers.__file__).parent / "models"


def _torchfix() -> Path:
    exe = VENV / "bin" / "torchfix"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", "torchfix==0.7.0", "libcst<1.6"], check=True)
    return exe


def _timed(command: List[str]) -> Tuple[float, float]:
    """Wall and CPU seconds (user + system of the process and its children) of ``command``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1, 16):  # torchfix exits 1 when it finds violations; migrate 16 on file errors
        raise SystemExit(f"{command[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path)
    parser.add_argument("--sample", type=int, default=300, metavar="N", help="about N files (0: all)")
    parser.add_argument("--jobs", default=str(os.cpu_count() or 1))
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    source = (args.directory or _default_dir()).resolve()
    torchfix = _torchfix()
    work = Path(tempfile.mkdtemp(prefix="npu-migrate-vs-torchfix-"))
    try:
        paths = sorted(p.relative_to(source) for p in source.rglob("*.py") if "__pycache__" not in p.parts)
        if args.sample:
            paths = paths[::max(1, len(paths) // args.sample)][:args.sample]
        tree = work / "tree"
        for rel in paths:
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / rel, tree / rel)
        lines = sum((tree / rel).read_bytes().count(b"\n") for rel in paths)
        print(f"{source}: {len(paths)} files, {lines} lines, --jobs {args.jobs}, {args.rounds} rounds")
        migrate = [sys.executable, "-m", "npu_migrate.migrate", "run", str(tree), "--out", str(work / "out"),
                   "--report-dir", str(work / "r"), "--no-cache", "--jobs", args.jobs]
        fix = [str(torchfix), "--select", "ALL", "--jobs", args.jobs, str(tree)]
        ratios, cpu_ratios = [], []
        for round_ in range(args.rounds):
            order = [("migrate", migrate), ("torchfix", fix)]
            if round_ % 2:
                order.reverse()
            times = {name: _timed(command) for name, command in order}
            shutil.rmtree(work / "out", ignore_errors=True)
            (mw, mc), (tw, tc) = times["migrate"], times["torchfix"]
            ratios.append(tw / mw)
            cpu_ratios.append(tc / mc)
            print(f"round {round_ + 1} ({order[0][0]} first): migrate {mw:7.1f} s wall {mc:7.1f} s CPU | torchfix "
                  f"{tw:7.1f} s wall {tc:7.1f} s CPU | ratio wall {tw / mw:5.1f}x CPU {tc / mc:5.1f}x (target >= 10x)")
        for what, values in (("wall", ratios), ("CPU", cpu_ratios)):
            print(f"ratio ({what}) over the rounds: median {statistics.median(values):.1f}x, min {min(values):.1f}x, "
                  f"max {max(values):.1f}x (target >= 10x)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
