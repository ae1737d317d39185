"""Distributed plumbing for the emulated devices: ``hccl`` (or ``nccl``) runs on ``gloo``.

Migrated code calls ``init_process_group("hccl")``; the emulator hands gloo the same call, so
distributed code runs on one machine (and on CPU). ``get_backend()`` then answers ``"gloo"``:
code that compares backend names against ``"hccl"`` sees the difference (facts §5 names the
same limitation for transfer_to_npu).
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable, List

import torch

from .device import DeviceMap, Patch, replace

# The collective library each emulated device type brings.
COLLECTIVE_BACKENDS = {"npu": "hccl", "cuda": "nccl"}


def map_backend(backend, dmap: DeviceMap):
    """``"hccl"`` → ``"gloo"``; in ``"cpu:gloo,npu:hccl"`` form, each device:backend pair."""
    if not isinstance(backend, str):
        return backend
    emulated = COLLECTIVE_BACKENDS[dmap.name]
    if ":" not in backend:
        return "gloo" if backend.lower() == emulated else backend
    pairs = []
    for pair in backend.split(","):
        device, _, name = pair.partition(":")
        pair = f"{dmap.map(device.strip())}:{'gloo' if name.strip().lower() == emulated else name.strip()}"
        if pair not in pairs:
            pairs.append(pair)
    return ",".join(pairs)


def _with_mapped_arguments(fn: Callable, **mappers: Callable) -> Callable:
    """``fn`` with each named argument (positional or keyword) passed through its mapper."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bound = signature.bind_partial(*args, **kwargs)
        for name, mapper in mappers.items():
            if name in bound.arguments:
                bound.arguments[name] = mapper(bound.arguments[name])
        return fn(*bound.args, **bound.kwargs)

    return wrapper


def distributed_patches(dmap: DeviceMap) -> List[Patch]:
    if not torch.distributed.is_available():
        return []
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    backend = functools.partial(map_backend, dmap=dmap)
    # gloo binds no device, so a process group's device_id is dropped; DDP keeps its device list
    # on a CUDA backing but must not get one for a CPU module.
    drop = lambda _value: None  # noqa: E731
    ddp_device = drop if dmap.backing.type == "cpu" else (lambda value: dmap.map(value, ints=True, deep=True))
    mapped = lambda **mappers: lambda original: _with_mapped_arguments(original, **mappers)  # noqa: E731
    return [
        Patch(dist, "init_process_group", mapped(backend=backend, device_id=drop)),
        Patch(dist, "new_group", mapped(backend=backend, device_id=drop)),
        Patch(DistributedDataParallel, "__init__", mapped(device_ids=ddp_device, output_device=ddp_device)),
        replace(dist, f"is_{COLLECTIVE_BACKENDS[dmap.name]}_available", lambda: True),
    ]
