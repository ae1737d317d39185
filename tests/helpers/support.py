"""Shared by the helper's tests: where npu_glue lives, inputs, and op counts from npu_glue."""

from pathlib import Path

import torch

from npu_migrate import kernels
from npu_migrate.migrate.parity.criteria import default_criteria
from npu_migrate.migrate.parity.metrics import compare
from tests.full_helper import GLUE, HELPERS  # noqa: F401 (the helper tests take them from here)
from tests.helpers.dispatch_counts import OpCounter
from tests.tolerances import recorded as tolerance  # noqa: F401 (the helper tests take it from here)

KERNELS = Path(kernels.__file__).resolve().parent  # the emulator: on hardware, inside the kernel


def counted(fn, *args, **kwargs):
    """(fn's result, the OpCounter of the ops dispatched from npu_glue, not from the emulator, while it ran)."""
    with OpCounter([GLUE], excluded=[KERNELS]) as counter:
        result = fn(*args, **kwargs)
    return result, counter


def qkv(b=2, nq=4, nkv=4, sq=5, skv=5, d=8, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    make = lambda n, s: torch.randn(b, n, s, d, generator=g).to(dtype)  # noqa: E731
    return make(nq, sq), make(nkv, skv), make(nkv, skv)


def dispatcher_op(name):
    """Whether the emulated ``torch_npu.<name>`` is a registered ``torch.ops.npu`` op (traceable by
    torch.compile through its fake implementation)."""
    try:
        getattr(torch.ops.npu, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def assert_parity(got, want, dtype):
    """``migrate parity``'s criteria for ``dtype`` (criteria.yaml): for results of several rounded
    steps, such as gradients under autocast, where one op's tolerance does not apply."""
    criteria = default_criteria()[str(dtype).replace("torch.", "")]
    verdict = criteria.judge(compare(want, got, rel_err=criteria.rel_err))
    assert verdict is None, verdict
