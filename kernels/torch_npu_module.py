"""The fake ``torch_npu`` package that the emulator puts in ``sys.modules``.

It exposes every op registered with ``@npu_op`` as the dispatcher op ``torch.ops.npu.<name>``
(``kernels.dispatcher`` defines them when the package is built, once per process), like the real
package, so calls to ``torch_npu.npu_x(...)`` are single ops to the dispatcher, FakeTensor tracing
and ``torch.compile``; ``torch_npu.npu`` (the same object as ``torch.npu``), ``torch_npu.optim``
(forwards to ``kernels.optim``, imported on first use), ``torch_npu.profiler`` (``kernels.profiler``) and a no-op
``torch_npu.contrib.transfer_to_npu``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
from typing import Any, Dict, List

from npu_migrate.kernels.device import Patch, replace

__version__ = "2.14.0+emulated"

# Submodules imported on first use: fake name -> the kernels module that provides it.
LAZY_SUBMODULES = {"torch_npu.optim": "npu_migrate.kernels.optim", "torch_npu.profiler": "npu_migrate.kernels.profiler"}


class TorchNpuModule(types.ModuleType):
    """``torch_npu``: the ops are attributes (``torch.ops.npu.<name>``); other names say they are not emulated."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"torch_npu.{name} is not emulated by kernels (the emulated NPU)")


def _ops() -> Dict[str, Any]:
    """name -> ``torch.ops.npu.<name>`` for every emulated op (registering them once)."""
    from npu_migrate.kernels import dispatcher
    from npu_migrate.kernels.registry import load_all

    if not dispatcher.register():
        raise RuntimeError("a real torch_npu is importable; the emulated ops are not registered over it")
    return {name: dispatcher.op(name) for name in load_all()}


class _LazyModule(types.ModuleType):
    """A module that imports its target on first attribute access and forwards to it."""

    def __init__(self, name: str, target: str):
        super().__init__(name, f"Emulated {name}: forwards to {target}.")
        self._target = target

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(importlib.import_module(self._target), name)

    def __dir__(self) -> List[str]:
        return dir(importlib.import_module(self._target))


def _package(name: str, doc: str, cls: type = types.ModuleType) -> types.ModuleType:
    module = cls(name, doc)
    module.__path__ = []
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    return module


def build(npu_module: types.ModuleType) -> Dict[str, types.ModuleType]:
    """The fake modules by their ``sys.modules`` name."""
    torch_npu = _package("torch_npu", "Emulated torch_npu (kernels): pure-PyTorch NPU ops.", TorchNpuModule)
    torch_npu.__version__ = __version__
    torch_npu.emulated = True
    torch_npu.npu = npu_module
    for name, op in _ops().items():
        setattr(torch_npu, name, op)
    contrib = _package("torch_npu.contrib", "Emulated torch_npu.contrib.")
    transfer = types.ModuleType(
        "torch_npu.contrib.transfer_to_npu",
        "No-op on the emulator: migrated code already names the npu device.",
    )
    contrib.transfer_to_npu = transfer
    torch_npu.contrib = contrib
    lazy = {name: _LazyModule(name, target) for name, target in LAZY_SUBMODULES.items()}
    for name, module in lazy.items():
        setattr(torch_npu, name.rpartition(".")[2], module)
    return {
        **lazy,
        "torch_npu": torch_npu,
        "torch_npu.npu": npu_module,
        "torch_npu.npu.amp": npu_module.amp,
        "torch_npu.contrib": contrib,
        "torch_npu.contrib.transfer_to_npu": transfer,
    }


def torch_npu_patches(npu_module: types.ModuleType) -> List[Patch]:
    """Install the fake package in ``sys.modules``; restoring removes it again."""
    return [replace(sys.modules, name, module) for name, module in build(npu_module).items()]
