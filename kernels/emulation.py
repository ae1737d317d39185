"""Switching an emulated device on and off.

``emulate()`` makes migrated code (``"npu"`` devices, ``torch.npu``, ``import torch_npu``) run
on the backing device; ``emulate_cuda()`` does the same for original code that names
``"cuda"`` on a machine without CUDA. Both build one table of patches from the shared pieces in
``kernels.device``, apply it, and restore it on exit. One emulation is active at a time, for the
whole process (every thread); entering the same one again nests.

The rules and limits, on purpose:

- Tensors really live on the backing device, so ``x.device`` is ``cpu`` (or ``cuda:N``) and
  ``torch.device("npu:0")`` *returns* the backing device: code that tests
  ``x.device.type == "npu"`` or prints the device sees the backing type.
- ``Tensor.is_npu`` is True for every tensor on the backing device while emulating (with a CPU
  backing, for every CPU tensor) and does not exist outside the emulation.
- Only names looked up through ``torch``, ``torch.Tensor``, ``torch.nn.Module``, ``torch.cuda``
  and ``torch.distributed`` at call time are redirected; a name bound before activation
  (``from torch import device``) keeps the original. Activate before importing model code.
- With a CPU backing every device index is the CPU: ``device_count()`` is 1, ``set_device(n)``
  accepts any n, RNG calls act on the CPU generator (so ``torch.npu.manual_seed`` also seeds CPU
  randomness), memory counters read 0, streams and events are synchronous, Event timing is
  wall-clock. Numerics are the backing device's (fp16 autocast runs CPU fp16 kernels).
- ``hccl``/``nccl`` run on gloo: ``get_backend()`` answers ``"gloo"``.
- Under ``emulate_cuda`` ``Tensor.is_cuda`` keeps its meaning (torch reads it to choose CUDA-only
  kernels); ``torch.cuda.nvtx`` and other CUDA-only internals stay unavailable.
- The emulated torch_npu ops are real dispatcher ops, ``torch.ops.npu.<name>`` (``torch_npu.<name>``
  is that op), registered on the first activation and kept for the rest of the process (see
  ``kernels.dispatcher``); ``torch.compile(..., fullgraph=True)`` traces code that calls them
  (tested with the eager, aot_eager and inductor backends, ``tests/kernels/test_compile.py``).
- Not emulated: graph capture (``NPUGraph`` raises ``NotEmulatedError``), torch_npu tensor
  methods (``x.npu_format_cast``), storages; ``torch_npu.profiler`` has the real API over torch's
  CPU profiler (``kernels.profiler``: no NPU device time);
  ``torch_npu.contrib.transfer_to_npu`` imports as a no-op; ``matmul.allow_hf32`` and
  ``conv.allow_hf32`` are flags without numeric effect; ``torch.npu.FloatTensor`` and friends
  construct and ``isinstance``-check but are not tensor types for ``x.type(...)``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Iterator, List

import torch

from npu_migrate.kernels.device import (
    REAL_DEVICE,
    DeviceMap,
    Patch,
    PatchSet,
    is_on_device_patch,
    replace,
    tensor_method_patches,
    torch_patches,
)
from npu_migrate.kernels.distributed import distributed_patches
from npu_migrate.kernels.npu_api import EmulatedDeviceModule, stream_patches
from npu_migrate.kernels.torch_npu_module import torch_npu_patches


@dataclass
class _Session:
    name: str
    backing: torch.device
    patches: PatchSet
    depth: int = 1


_lock = threading.RLock()
_session: _Session | None = None


def real_torch_npu_installed() -> bool:
    """True when a real ``torch_npu`` is imported or importable (our fake does not count)."""
    module = sys.modules.get("torch_npu")
    if module is not None:
        return not getattr(module, "emulated", False)
    return importlib.util.find_spec("torch_npu") is not None


def _shared_patches(dmap: DeviceMap, api: EmulatedDeviceModule) -> List[Patch]:
    """What both directions patch: device arguments, ``Tensor.<name>()``, streams, distributed."""
    return [*torch_patches(dmap, api), *tensor_method_patches(dmap), *stream_patches(), *distributed_patches(dmap)]


def _npu_patches(backing: torch.device) -> List[Patch]:
    dmap = DeviceMap("npu", backing)
    api = EmulatedDeviceModule("npu", backing)
    return [
        replace(torch, "npu", api),
        replace(sys.modules, "torch.npu", api),
        replace(sys.modules, "torch.npu.amp", api.amp),
        is_on_device_patch(dmap),
        *_shared_patches(dmap, api),
        *torch_npu_patches(api),
    ]


def _cuda_patches(backing: torch.device) -> List[Patch]:
    """torch.cuda keeps its module object; the functions it shares with the emulated surface are
    replaced. ``Tensor.is_cuda`` is left alone: torch itself reads it to pick CUDA-only paths."""
    dmap = DeviceMap("cuda", backing)
    api = EmulatedDeviceModule("cuda", backing)
    shared = [n for n in dir(api) if n != "amp" and hasattr(torch.cuda, n)]
    return [*(replace(torch.cuda, n, getattr(api, n)) for n in shared), *_shared_patches(dmap, api)]


def _backing_device(backing: str | torch.device) -> torch.device:
    device = REAL_DEVICE(backing) if isinstance(backing, str) else backing
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"backing must be 'cpu' or 'cuda', not {backing!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("backing='cuda' was asked for, but CUDA is not available on this machine")
    return REAL_DEVICE(device.type)


def _forget_dynamo_table() -> None:
    """Dynamo files torch's functions by identity in a table it builds once, on first use: built
    while torch.ones & co. are patched, it would never again know the real ones (a later
    ``torch.compile`` outside the emulation breaks its graph on them), and the reverse. It is
    dropped whenever the patches change, so that it is rebuilt from the torch then in place."""
    trace_rules = sys.modules.get("torch._dynamo.trace_rules")
    if trace_rules is not None:
        trace_rules.get_torch_obj_rule_map.cache_clear()


def _start(name: str, backing: torch.device, build) -> bool:
    global _session
    with _lock:
        if _session is not None:
            if (_session.name, _session.backing) != (name, backing):
                raise RuntimeError(
                    f"the emulated {_session.name} (on {_session.backing.type}) is active; "
                    f"leave it before emulating {name} on {backing.type}"
                )
            _session.depth += 1
            return True
        patches = PatchSet(build(backing))
        patches.apply()
        _forget_dynamo_table()
        _session = _Session(name, backing, patches)
        return True


def activate(backing: str = "cpu") -> bool:
    """Emulate the NPU for the whole process, until ``deactivate()``.

    Returns False, with a warning, and changes nothing when a real ``torch_npu`` is importable.
    """
    device = _backing_device(backing)
    if real_torch_npu_installed():
        warnings.warn("a real torch_npu is installed; it stays in charge and the NPU is not emulated",
                      RuntimeWarning, stacklevel=2)
        return False
    return _start("npu", device, _npu_patches)


def activate_cuda(backing: str = "cpu") -> bool:
    """Run code written for CUDA on ``backing``. Returns False (nothing to do) when ``backing`` is
    "cuda" and CUDA is there."""
    device = _backing_device(backing)
    if device.type == "cuda":
        return False
    return _start("cuda", device, _cuda_patches)


def deactivate() -> None:
    """Leave the active emulation (the innermost level when nested); a no-op when none is active."""
    global _session
    with _lock:
        if _session is None:
            return
        _session.depth -= 1
        if _session.depth == 0:
            session, _session = _session, None
            session.patches.restore()
            _forget_dynamo_table()


def is_emulated(device: str = "npu") -> bool:
    """True while ``device`` ("npu" or "cuda") is emulated."""
    return _session is not None and _session.name == device


@contextlib.contextmanager
def emulate(backing: str = "cpu") -> Iterator[bool]:
    """``with emulate() as active:`` — the NPU is emulated inside; ``active`` is False when a real
    torch_npu is installed (and nothing was changed)."""
    active = activate(backing)
    try:
        yield active
    finally:
        if active:
            deactivate()


@contextlib.contextmanager
def emulate_cuda(backing: str = "cpu") -> Iterator[bool]:
    """``with emulate_cuda():`` — code written for CUDA runs on ``backing``."""
    active = activate_cuda(backing)
    try:
        yield active
    finally:
        if active:
            deactivate()
