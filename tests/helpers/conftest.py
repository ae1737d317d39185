"""Fixtures for the vendored helper's tests: ``glue`` (npu_glue imported under the emulated NPU) and
``spy`` (counts the torch_npu ops the helper calls)."""

import sys
from collections import Counter

import pytest

from npu_migrate import kernels
from tests.helpers.support import HELPERS


@pytest.fixture(scope="module")
def glue():
    import torch._dynamo  # noqa: F401 - before the emulator patches torch (tests/helpers/migrated_models.py)

    with kernels.emulate():
        sys.path.insert(0, str(HELPERS))
        try:
            sys.modules.pop("npu_glue", None)
            import npu_glue

            yield npu_glue
        finally:
            sys.path.remove(str(HELPERS))
            sys.modules.pop("npu_glue", None)


@pytest.fixture
def spy(glue, monkeypatch):
    """``spy[op]``: how many times the helper called ``torch_npu.<op>``; ``spy.args[op]`` and
    ``spy.kwargs[op]``: the arguments of each call."""
    calls = Counter()
    calls.kwargs, calls.args = {}, {}

    def wrap(name):
        real = getattr(glue.torch_npu, name)

        def spied(*args, **kwargs):
            calls[name] += 1
            calls.kwargs.setdefault(name, []).append(kwargs)
            calls.args.setdefault(name, []).append(args)
            return real(*args, **kwargs)

        return spied

    for name in ("npu_fusion_attention", "npu_rotary_mul", "npu_rms_norm", "npu_swiglu"):
        monkeypatch.setattr(glue.torch_npu, name, wrap(name))
    return calls
