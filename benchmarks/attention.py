"""Time and peak memory of the emulated ``npu_fusion_attention`` against SDPA (and eager attention).

Run: ``python benchmarks/attention.py [--lengths 1024 2048 4096 8192] [--repeats 5]``

Shape: BNSD, B=1, N=8, D=128, float32, ``scale=1/sqrt(D)``; two cases: ``full`` (no mask) and
``causal`` (``sparse_mode=2`` with the compressed mask, against SDPA's ``is_causal=True``). The
implementations:

* ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` (the baseline of the ratios);
* ``npu_fa``: ``torch_npu.npu_fusion_attention`` under ``kernels.emulate()`` (the dispatcher op,
  as migrated code calls it; all seven outputs, softmax statistics included). Both cases map onto
  SDPA, so it takes the emulator's SDPA fast path (``kernels._fusion_attention_sdpa``);
* ``blocked``: the same call with the fast path off: the blocked FlashAttention-2 core that every
  call SDPA cannot express (pse, dropout, bands, varlen, ...) still takes;
* ``eager``: ``softmax(q @ k^T * scale) @ v``, which materialises the S x S scores (memory only
  grows quadratically; skipped where its two S x S float32 buffers would not fit in half of the
  machine's free memory).

Time: for each (case, length) one child process times the implementations alternately, best of
``--repeats`` calls each, so a busy machine slows both sides of a ratio alike. On a machine that
other jobs load, ``--threads 1 --clock cpu`` measures each call's own CPU time on one thread,
which the other jobs barely change (wall time on two contended threads inflates every small op
of the blocked path). Peak memory: one
fresh child per implementation; after the inputs are built and one warm-up call is done, it writes
``5`` to ``/proc/self/clear_refs`` (which resets the resident-set high-water mark VmHWM to the
current RSS), and ``VmHWM - RSS before`` after one more call is the extra memory the call needed
at its peak, outputs included. Ratios are to SDPA in the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
B, N, D = 1, 8, 128
IMPLS = ("sdpa", "npu_fa", "blocked", "eager")
CASES = ("full", "causal")


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _functions(case: str, seq: int):
    import torch
    import torch.nn.functional as F

    from npu_migrate import kernels
    from npu_migrate.kernels import _fusion_attention_sdpa as fast_path

    kernels.activate()
    import torch_npu

    torch.manual_seed(0)
    q, k, v = (torch.randn(B, N, seq, D) for _ in range(3))
    scale = 1 / math.sqrt(D)
    causal = case == "causal"
    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1) if causal else None
    tril = torch.ones(seq, seq, dtype=torch.bool).tril() if causal else None

    def eager():
        s = q @ k.transpose(-1, -2) * scale
        if causal:
            s = s.masked_fill(~tril, float("-inf"))
        return torch.softmax(s, dim=-1) @ v

    def npu_fa():
        return torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", scale=scale, atten_mask=mask,
                                              sparse_mode=2 if causal else 0)

    def blocked():
        fast_path.ENABLED = False
        try:
            return npu_fa()
        finally:
            fast_path.ENABLED = True

    return {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=causal),
        "npu_fa": npu_fa,
        "blocked": blocked,
        "eager": eager,
    }


def _time_child(case: str, seq: int, impls: list, repeats: int, clock: str) -> None:
    import torch

    fns = _functions(case, seq)
    now = time.process_time if clock == "cpu" else time.perf_counter
    best = {name: math.inf for name in impls}
    with torch.no_grad():
        for name in impls:
            fns[name]()  # warm-up (thread pool, allocator)
        for _ in range(repeats):
            for name in impls:
                start = now()
                fns[name]()
                best[name] = min(best[name], now() - start)
    print(json.dumps(best))


def _memory_child(case: str, seq: int, impl: str) -> None:
    import torch

    fn = _functions(case, seq)[impl]
    with torch.no_grad():
        fn()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _rss_kib("VmRSS")
        out = fn()
        peak = _rss_kib("VmHWM") - before
        del out
    print(json.dumps({"peak_mib": peak / 1024}))


def _child(threads: int, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *args],
                          capture_output=True, text=True, check=True, env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _eager_fits(seq: int) -> bool:
    with open("/proc/meminfo") as f:
        avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    return 2 * B * N * seq * seq * 4 < avail / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads of the children (0: torch's default)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall: elapsed time; cpu: the process's CPU time (use with --threads 1)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, case, seq, *rest = args.child
        if kind == "time":
            _time_child(case, int(seq), rest[2:], int(rest[0]), rest[1])
        else:
            _memory_child(case, int(seq), rest[0])
        return

    import torch

    threads = args.threads or torch.get_num_threads()
    print(f"BNSD B={B} N={N} D={D} float32, torch {torch.__version__}, {threads} threads, {args.clock} clock; "
          f"time = best of {args.repeats} alternating calls; peak = extra resident memory (VmHWM) in a fresh process")
    print(f"{'case':>6} {'S':>6} {'impl':>7} {'time ms':>10} {'peak MiB':>10} {'time/sdpa':>10} {'mem/sdpa':>9}")
    for case in args.cases:
        for seq in args.lengths:
            impls = [i for i in IMPLS if i != "eager" or _eager_fits(seq)]
            times = _child(args.threads, "time", case, str(seq), str(args.repeats), args.clock, *impls)
            peaks = {impl: _child(args.threads, "memory", case, str(seq), impl)["peak_mib"] for impl in impls}
            for impl in impls:
                t_ratio = times[impl] / times["sdpa"]
                m_ratio = f"{peaks[impl] / peaks['sdpa']:.2f}" if peaks["sdpa"] > 0 else "-"
                print(f"{case:>6} {seq:>6} {impl:>7} {times[impl] * 1e3:>10.1f} {peaks[impl]:>10.1f} "
                      f"{t_ratio:>10.2f} {m_ratio:>9}")
            if "eager" not in impls:
                print(f"{case:>6} {seq:>6} {'eager':>7} {'skipped: S x S scores would not fit':>40}")


if __name__ == "__main__":
    main()
