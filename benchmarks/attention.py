"""Time and peak memory of the emulated ``npu_fusion_attention`` against eager attention and SDPA.

Run: ``python benchmarks/attention.py [--lengths 512 1024 2048 4096 16384] [--repeats 3]``

Shape: BNSD, B=1, N=8, D=128, float32, no mask, ``scale=1/sqrt(D)``. Three implementations:

* ``eager``: ``softmax(q @ k^T * scale) @ v`` (materialises the S x S scores);
* ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention``;
* ``npu_fa``: ``kernels.fusion_attention.npu_fusion_attention`` (blocked, online softmax).

Each (implementation, length) runs in a fresh subprocess, so one measurement cannot inherit
another's allocator state. Peak memory is measured by the kernel, not estimated: after the
inputs are built and one warm-up call is done, the child writes ``5`` to
``/proc/self/clear_refs``, which resets the process's resident-set high-water mark (VmHWM) to
its current RSS; after the timed calls, ``VmHWM - RSS before`` is the extra resident memory the
attention needed at its peak (outputs included). Time is the best of ``--repeats`` calls
(``time.perf_counter``). Eager is skipped where its two S x S float32 buffers (scores and
probabilities) would not fit in half of the machine's free memory; ratios are to eager in the
same run ("-" where eager was skipped).
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
IMPLS = ("eager", "sdpa", "npu_fa")


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _child(impl: str, seq: int, repeats: int) -> None:
    sys.path.insert(0, ROOT)
    import torch
    import torch.nn.functional as F

    from npu_migrate.kernels.fusion_attention import npu_fusion_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(B, N, seq, D) for _ in range(3))
    scale = 1 / math.sqrt(D)
    fns = {
        "eager": lambda: torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1) @ v,
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, scale=scale),
        "npu_fa": lambda: npu_fusion_attention(q, k, v, N, "BNSD", scale=scale)[0],
    }
    fn = fns[impl]
    with torch.no_grad():
        fn()  # warm-up (thread pool, allocator)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _rss_kib("VmRSS")
        best = math.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = fn()
            best = min(best, time.perf_counter() - t0)
            del out
        peak = _rss_kib("VmHWM") - before
    print(json.dumps({"time_s": best, "peak_mib": peak / 1024}))


def _measure(impl: str, seq: int, repeats: int) -> dict:
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", impl, str(seq), str(repeats)],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _eager_fits(seq: int) -> bool:
    with open("/proc/meminfo") as f:
        avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    return 2 * B * N * seq * seq * 4 < avail / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 16384])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        impl, seq, repeats = args.child
        _child(impl, int(seq), int(repeats))
        return

    import torch

    print(f"BNSD B={B} N={N} D={D} float32, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"time = best of {args.repeats}, peak = extra resident memory (VmHWM) in a fresh process")
    print(f"{'S':>6} {'impl':>7} {'time ms':>10} {'peak MiB':>10} {'time/eager':>11} {'mem/eager':>10}")
    for seq in args.lengths:
        rows = {}
        for impl in IMPLS:
            if impl == "eager" and not _eager_fits(seq):
                continue
            repeats = args.repeats if seq <= 4096 else 1
            rows[impl] = _measure(impl, seq, repeats)
        eager = rows.get("eager")
        for impl, r in rows.items():
            t_ratio = f"{r['time_s'] / eager['time_s']:.2f}" if eager else "-"
            m_ratio = f"{r['peak_mib'] / eager['peak_mib']:.3f}" if eager and eager["peak_mib"] > 0 else "-"
            print(f"{seq:>6} {impl:>7} {r['time_s'] * 1e3:>10.1f} {r['peak_mib']:>10.1f} {t_ratio:>11} {m_ratio:>10}")
        if not eager:
            print(f"{seq:>6} {'eager':>7} {'skipped: S x S scores would not fit':>44}")


if __name__ == "__main__":
    main()
