"""What the helper's per-site record costs a guard call (issue 19 item 6): each guard timed with
``NPU_GLUE_SITES`` "off" and "count" in the same run, on the emulated NPU (CPU), best of 3.

    python benchmarks/site_record_cost.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
CALLS = 20000


def main() -> int:
    from npu_migrate import kernels

    sys.path.insert(0, str(ROOT))
    from tests.full_helper import HELPERS  # the helper with every section, assembled

    kernels.activate("cpu")
    sys.path.insert(0, str(HELPERS))
    import npu_glue

    x, cos = torch.randn(2, 4, 16, 64), torch.randn(1, 1, 16, 64)
    w = torch.ones(64)
    guards = {
        "rotary_fits": lambda: npu_glue.rotary_fits(x, cos, cos, "half", site="m.py:1:NPU310"),
        "can_fuse (no mask)": lambda: npu_glue.can_fuse(x, x, x, site="m.py:2:NPU302"),
        "rms_norm_fits": lambda: npu_glue.rms_norm_fits(x, w, mixed_dtype=True, site="m.py:3:NPU320"),
        "can_fuse (fallback)": lambda: npu_glue.can_fuse(x, x, x.half(), site="m.py:4:NPU302"),
    }

    def per_call(mode, guard):
        npu_glue.SITES = mode
        npu_glue.reset_site_counts()
        started = time.perf_counter()
        for _ in range(CALLS):
            guard()
        return (time.perf_counter() - started) / CALLS * 1e6

    for name, guard in guards.items():
        off = min(per_call("off", guard) for _ in range(3))
        on = min(per_call("count", guard) for _ in range(3))
        print(f"{name}: {off:.2f} us off, {on:.2f} us counting: +{on - off:.2f} us per call ({on / off:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
