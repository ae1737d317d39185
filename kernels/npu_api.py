"""The ``torch.npu`` module surface, emulated on a backing device.

One class serves both directions: ``EmulatedDeviceModule("npu", backing)`` becomes ``torch.npu``
(and ``torch_npu.npu``); under ``emulate_cuda`` an ``EmulatedDeviceModule("cuda", cpu)`` lends
its functions to the real ``torch.cuda``. With a CUDA backing, device, RNG and memory calls are
forwarded to ``torch.cuda``; with a CPU backing there is one device, RNG calls act on the CPU
generator (so ``torch.npu.manual_seed`` also seeds CPU randomness), memory counters read 0, and
streams and events are synchronous. Names not emulated raise an AttributeError that says so.
"""

from __future__ import annotations

import types
from typing import Any, List

import torch

from npu_migrate.kernels._npu_amp import AmpMethods, amp_module
from npu_migrate.kernels._npu_graphs import Graph, GraphMethods, NotEmulatedError
from npu_migrate.kernels._npu_memory import MemoryMethods, host_memory
from npu_migrate.kernels._npu_rng import RngMethods
from npu_migrate.kernels._npu_streams import Event, Stream, StreamContext, StreamMethods, stream_patches

__all__ = ["EmulatedDeviceModule", "Event", "NotEmulatedError", "Stream", "StreamContext", "stream_patches"]

# Per emulated type: what ``get_device_name`` says, ``get_device_capability`` (None on a real
# NPU, facts §4.2) and the name of the graph class.
_IDENTITY = {
    "npu": {"label": "Ascend910B", "capability": None, "graph": "NPUGraph"},
    "cuda": {"label": "CUDA GPU", "capability": (8, 0), "graph": "CUDAGraph"},
}

# torch_npu configuration calls that have no meaning on the emulator: accepted and ignored.
_IGNORED_SETTINGS = (
    "set_compile_mode", "set_option", "set_aoe", "set_mm_bmm_format_nd", "set_dump", "init_dump",
    "finalize_dump", "set_deterministic_level", "enable_deterministic_with_backward",
    "disable_deterministic_with_backward", "clear_npu_overflow_flag", "set_sync_debug_mode",
    "set_per_process_memory_fraction", "empty_virt_addr_cache", "host_empty_cache", "ipc_collect",
)
_TENSOR_TYPES = (
    "FloatTensor", "HalfTensor", "BFloat16Tensor", "DoubleTensor", "LongTensor", "IntTensor",
    "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor",
)


def _ignore(*args: Any, **kwargs: Any) -> None:
    return None


_RNG_FUNCTIONS = ("manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
                  "set_rng_state", "get_rng_state_all", "set_rng_state_all")


def _random_module(api: "EmulatedDeviceModule") -> types.ModuleType:
    """``torch.<name>.random`` (torch_npu.npu.random): the module's RNG functions."""
    module = types.ModuleType(f"{api.__name__}.random", "Emulated random number generation.")
    for name in _RNG_FUNCTIONS:
        setattr(module, name, getattr(api, name))
    return module


class EmulatedDeviceModule(StreamMethods, RngMethods, MemoryMethods, AmpMethods, GraphMethods, types.ModuleType):
    """``torch.<name>`` for an emulated device type, backed by ``backing``; the functions of each
    concern come from the ``kernels._npu_*`` mixins, the device functions are defined here."""

    def __init__(self, name: str, backing: torch.device):
        super().__init__(f"torch.{name}", f"Emulated torch.{name} (kernels.npu_api), backed by {backing.type}.")
        self._name = name
        self._backing = torch.device(backing.type)
        self._cuda = backing.type == "cuda"
        self._current = 0
        self._autocast_dtype = torch.float16
        identity = _IDENTITY[name]
        self._label = identity["label"]
        self._capability = identity["capability"]
        for setting in _IGNORED_SETTINGS:
            setattr(self, setting, _ignore)
        self._install_memory_counters()
        for type_name in _TENSOR_TYPES:
            setattr(self, type_name, _tensor_type(type_name, self._backing))
        self.Stream = type("Stream", (Stream,), {"_api": self})
        self.Event = type("Event", (Event,), {"_api": self})
        self.device = type("device", (_DeviceContext,), {"_api": self})
        graph = identity["graph"]
        setattr(self, graph, type(graph, (Graph,), {"_what": f"torch.{name}.{graph}"}))
        self.StreamContext = StreamContext
        self._default_stream = self.Stream()
        self.matmul = types.SimpleNamespace(allow_hf32=False)
        self.conv = types.SimpleNamespace(allow_hf32=True)
        self.amp = amp_module(name, self._backing)
        self.random = _random_module(self)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise AttributeError(f"torch.{self._name}.{attr} is not emulated by kernels (the emulated NPU)")

    def __dir__(self) -> List[str]:
        public = [n for n in dir(type(self)) if not n.startswith("_")]
        return sorted(set(public) | {n for n in vars(self) if not n.startswith("_")})

    # ------------------------------------------------------------------ devices

    def _index(self, device: Any = None) -> int:
        """The device index meant by ``device`` (None, int, "npu:1", a device or a Tensor)."""
        if isinstance(device, torch.Tensor):
            device = device.device
        if device is None:
            return self.current_device()
        if isinstance(device, int):
            return device
        if isinstance(device, str):
            _, _, index = device.partition(":")
            return int(index) if index else self.current_device()
        return self.current_device() if device.index is None else device.index

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def init(self) -> None:
        return None

    def device_count(self) -> int:
        return torch.cuda.device_count() if self._cuda else 1

    def set_device(self, device: Any) -> None:
        """Select a device. With a CPU backing every index is accepted and means the CPU."""
        index = self._index(device)
        if self._cuda:
            torch.cuda.set_device(index)
        self._current = index

    def current_device(self) -> int:
        return torch.cuda.current_device() if self._cuda else self._current

    def device_of(self, obj: torch.Tensor):
        return self.device(obj.device.index if obj.device.type == "cuda" else None)

    def get_device_name(self, device: Any = None) -> str:
        return f"{self._label} (emulated on {self._backing.type})"

    def get_device_capability(self, device: Any = None):
        return self._capability

    def get_device_properties(self, device: Any = None):
        total = torch.cuda.get_device_properties(self._index(device)).total_memory if self._cuda else host_memory()[1]
        props = types.SimpleNamespace(name=self.get_device_name(device), total_memory=total)
        if self._capability is not None:
            props.major, props.minor = self._capability
            props.multi_processor_count = 1
        return props

    def can_device_access_peer(self, device: Any, peer: Any) -> bool:
        return False

    def synchronize(self, device: Any = None) -> None:
        if self._cuda:
            torch.cuda.synchronize(self._index(device))

    def utilization(self, device: Any = None) -> int:
        return 0


class _DeviceContext:
    """``with torch.npu.device(i):`` — selects device ``i`` for the block."""

    _api: EmulatedDeviceModule

    def __init__(self, device: Any):
        self.idx = -1 if device is None else self._api._index(device)
        self._previous = -1

    def __enter__(self) -> "_DeviceContext":
        if self.idx >= 0:
            self._previous = self._api.current_device()
            self._api.set_device(self.idx)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.idx >= 0:
            self._api.set_device(self._previous)


class _TensorTypeMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, torch.Tensor) and obj.dtype == cls.dtype and obj.device.type == cls._backing.type

    def __call__(cls, *args: Any, **kwargs: Any) -> torch.Tensor:
        return cls._cpu_type(*args, **kwargs).to(cls._backing)


def _tensor_type(name: str, backing: torch.device) -> type:
    """``torch.npu.FloatTensor`` etc.: the legacy constructor, placed on the backing device."""
    cpu_type = getattr(torch, name)
    return _TensorTypeMeta(name, (), {"dtype": cpu_type.dtype, "_cpu_type": cpu_type, "_backing": backing})

