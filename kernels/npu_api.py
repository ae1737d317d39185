"""The ``torch.npu`` module surface, emulated on a backing device.

One class serves both directions: ``EmulatedDeviceModule("npu", backing)`` becomes ``torch.npu``
(and ``torch_npu.npu``); under ``emulate_cuda`` an ``EmulatedDeviceModule("cuda", cpu)`` lends
its functions to the real ``torch.cuda``. With a CUDA backing, device, RNG and memory calls are
forwarded to ``torch.cuda``; with a CPU backing there is one device, RNG calls act on the CPU
generator (so ``torch.npu.manual_seed`` also seeds CPU randomness), memory counters read 0, and
streams and events are synchronous. Names not emulated raise an AttributeError that says so.
"""

from __future__ import annotations

import functools
import os
import time
import types
from typing import Any, List

import torch

from kernels.device import Patch

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
# Memory counters: forwarded to torch.cuda with a CUDA backing, 0 with a CPU one.
_MEMORY_COUNTERS = (
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
)
_MEMORY_RESETS = ("reset_peak_memory_stats", "reset_accumulated_memory_stats", "reset_max_memory_allocated")
_TENSOR_TYPES = (
    "FloatTensor", "HalfTensor", "BFloat16Tensor", "DoubleTensor", "LongTensor", "IntTensor",
    "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor",
)


class NotEmulatedError(RuntimeError):
    """A torch_npu feature the emulator does not provide."""


def _ignore(*args: Any, **kwargs: Any) -> None:
    return None


class EmulatedDeviceModule(types.ModuleType):
    """``torch.<name>`` for an emulated device type, backed by ``backing``."""

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
        for counter in _MEMORY_COUNTERS:
            setattr(self, counter, self._memory_counter(counter))
        for reset in _MEMORY_RESETS:
            setattr(self, reset, self._memory_counter(reset, result=None))
        self.memory_cached, self.max_memory_cached = self.memory_reserved, self.max_memory_reserved
        self.reset_max_memory_cached = self.reset_peak_memory_stats
        for type_name in _TENSOR_TYPES:
            setattr(self, type_name, _tensor_type(type_name, self._backing))
        self.Stream = type("Stream", (Stream,), {"_api": self})
        self.Event = type("Event", (Event,), {"_api": self})
        self.device = type("device", (_DeviceContext,), {"_api": self})
        graph = identity["graph"]
        setattr(self, graph, type(graph, (_Graph,), {"_what": f"torch.{name}.{graph}"}))
        self.StreamContext = StreamContext
        self._default_stream = self.Stream()
        self.matmul = types.SimpleNamespace(allow_hf32=False)
        self.conv = types.SimpleNamespace(allow_hf32=True)
        self.amp = _amp_module(name, self._backing)

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
        total = torch.cuda.get_device_properties(self._index(device)).total_memory if self._cuda else _host_memory()[1]
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

    # ------------------------------------------------------------------ streams

    def current_stream(self, device: Any = None) -> "Stream":
        return self._default_stream

    default_stream = current_stream

    def set_stream(self, stream: "Stream") -> None:
        return None

    def stream(self, stream: "Stream") -> "StreamContext":
        return StreamContext(stream)

    def get_sync_debug_mode(self) -> int:
        return 0

    # ------------------------------------------------------------------ random numbers

    # With a CPU backing these act on torch.default_generator directly: torch.manual_seed itself
    # calls torch.cuda.manual_seed_all, which is this module under emulate_cuda.

    def manual_seed(self, seed: int) -> None:
        if self._cuda:
            torch.cuda.manual_seed(seed)
        else:
            torch.default_generator.manual_seed(int(seed))

    def manual_seed_all(self, seed: int) -> None:
        if self._cuda:
            torch.cuda.manual_seed_all(seed)
        else:
            torch.default_generator.manual_seed(int(seed))

    def seed(self) -> None:
        if self._cuda:
            torch.cuda.seed()
        else:
            torch.default_generator.seed()

    def seed_all(self) -> None:
        if self._cuda:
            torch.cuda.seed_all()
        else:
            torch.default_generator.seed()

    def initial_seed(self) -> int:
        return torch.cuda.initial_seed() if self._cuda else torch.default_generator.initial_seed()

    def get_rng_state(self, device: Any = "npu") -> torch.Tensor:
        return torch.cuda.get_rng_state(self._index(device)) if self._cuda else torch.default_generator.get_state()

    def set_rng_state(self, new_state: torch.Tensor, device: Any = "npu") -> None:
        if self._cuda:
            torch.cuda.set_rng_state(new_state, self._index(device))
        else:
            torch.default_generator.set_state(new_state)

    def get_rng_state_all(self) -> List[torch.Tensor]:
        return [self.get_rng_state(i) for i in range(self.device_count())]

    def set_rng_state_all(self, new_states: List[torch.Tensor]) -> None:
        for i, state in enumerate(new_states):
            self.set_rng_state(state, i)

    # ------------------------------------------------------------------ memory

    def _memory_counter(self, name: str, result: Any = 0):
        def counter(device: Any = None):
            return getattr(torch.cuda, name)(self._index(device)) if self._cuda else result

        counter.__name__ = name
        return counter

    def memory_stats(self, device: Any = None) -> dict:
        return torch.cuda.memory_stats(self._index(device)) if self._cuda else {}

    def memory_stats_as_nested_dict(self, device: Any = None) -> dict:
        return torch.cuda.memory_stats_as_nested_dict(self._index(device)) if self._cuda else {}

    def memory_summary(self, device: Any = None, abbreviated: bool = False) -> str:
        if self._cuda:
            return torch.cuda.memory_summary(self._index(device), abbreviated)
        return f"emulated {self._name} on cpu: no memory statistics"

    def memory_snapshot(self) -> list:
        return torch.cuda.memory_snapshot() if self._cuda else []

    def empty_cache(self) -> None:
        if self._cuda:
            torch.cuda.empty_cache()

    def mem_get_info(self, device: Any = None):
        return torch.cuda.mem_get_info(self._index(device)) if self._cuda else _host_memory()

    def get_per_process_memory_fraction(self, device: Any = None) -> float:
        return 1.0

    # ------------------------------------------------------------------ amp and precision

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return True

    def get_amp_supported_dtype(self) -> List[torch.dtype]:
        return [torch.float16, torch.bfloat16, torch.float32]

    def is_autocast_enabled(self) -> bool:
        return torch.is_autocast_enabled(self._backing.type)

    def set_autocast_enabled(self, enabled: bool) -> None:
        torch.set_autocast_enabled(self._backing.type, enabled)

    def get_autocast_dtype(self) -> torch.dtype:
        """The dtype ``autocast`` uses when none is given (float16, as on a real NPU)."""
        return self._autocast_dtype

    def set_autocast_dtype(self, dtype: torch.dtype) -> None:
        self._autocast_dtype = dtype

    def get_npu_overflow_flag(self) -> bool:
        return False

    def get_mm_bmm_format_nd(self) -> bool:
        return True

    # ------------------------------------------------------------------ graphs (not emulated)

    def graph(self, *args: Any, **kwargs: Any):
        _not_emulated(f"torch.{self._name}.graph")

    def make_graphed_callables(self, *args: Any, **kwargs: Any):
        _not_emulated(f"torch.{self._name}.make_graphed_callables")

    def graph_pool_handle(self):
        _not_emulated(f"torch.{self._name}.graph_pool_handle")

    def is_current_stream_capturing(self) -> bool:
        return False


def _not_emulated(what: str):
    raise NotEmulatedError(f"{what} is not emulated: graph capture needs a real device; run eagerly instead")


def _host_memory():
    """(free, total) bytes of host memory, the CPU backing's answer to ``mem_get_info``."""
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page
    except (ValueError, OSError, AttributeError):
        return 0, 0


class Stream:
    """A stream on the emulated device. Work runs in order on the backing device, so a stream
    only needs to synchronise with it."""

    _api: EmulatedDeviceModule

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any):
        self.device = self._api._backing
        self.priority = priority

    def synchronize(self) -> None:
        self._api.synchronize()

    def query(self) -> bool:
        return True

    def wait_event(self, event: "Event") -> None:
        return None

    def wait_stream(self, stream: "Stream") -> None:
        return None

    def record_event(self, event: "Event" | None = None) -> "Event":
        event = event or self._api.Event()
        event.record(self)
        return event


class Event:
    """An event with wall-clock timing: ``record`` synchronises the backing device first."""

    _api: EmulatedDeviceModule

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self._time: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        self._api.synchronize()
        self._time = time.perf_counter()

    def synchronize(self) -> None:
        self._api.synchronize()

    def query(self) -> bool:
        return True

    def wait(self, stream: Stream | None = None) -> None:
        return None

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds from this event to ``end_event``, as in ``torch.cuda.Event``."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with enable_timing=True")
        if self._time is None or end_event._time is None:
            raise RuntimeError("Both events must be recorded before calling elapsed_time")
        return (end_event._time - self._time) * 1000.0


def stream_patches() -> List[Patch]:
    """``Tensor.record_stream`` accepts an emulated stream (a no-op: all work is ordered)."""

    def record_stream(original):
        @functools.wraps(original)
        def wrapper(self, stream):
            return None if isinstance(stream, Stream) else original(self, stream)

        return wrapper

    return [Patch(torch.Tensor, "record_stream", record_stream)]


class StreamContext:
    """``with torch.npu.stream(s):`` — a no-op, since all work is ordered on the backing device."""

    def __init__(self, stream: Stream | None):
        self.stream = stream

    def __enter__(self) -> Stream | None:
        return self.stream

    def __exit__(self, *exc: Any) -> None:
        return None


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


class _Graph:
    """``NPUGraph``: constructing one works; capturing or replaying raises ``NotEmulatedError``."""

    _what: str

    def __init__(self, *args: Any, **kwargs: Any):
        return None

    def capture_begin(self, *args: Any, **kwargs: Any):
        _not_emulated(self._what)

    capture_end = replay = reset = pool = debug_dump = enable_debug_mode = capture_begin


class _TensorTypeMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, torch.Tensor) and obj.dtype == cls.dtype and obj.device.type == cls._backing.type

    def __call__(cls, *args: Any, **kwargs: Any) -> torch.Tensor:
        return cls._cpu_type(*args, **kwargs).to(cls._backing)


def _tensor_type(name: str, backing: torch.device) -> type:
    """``torch.npu.FloatTensor`` etc.: the legacy constructor, placed on the backing device."""
    cpu_type = getattr(torch, name)
    return _TensorTypeMeta(name, (), {"dtype": cpu_type.dtype, "_cpu_type": cpu_type, "_backing": backing})


def _amp_module(name: str, backing: torch.device) -> types.ModuleType:
    """``torch.<name>.amp``: autocast (float16 by default, as on a real NPU), GradScaler and the
    custom_fwd/custom_bwd decorators, all acting on the backing device."""
    amp = types.ModuleType(f"torch.{name}.amp", "Emulated automatic mixed precision.")
    device_type = backing.type

    class autocast(torch.amp.autocast):
        def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True):
            super().__init__(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    class GradScaler(torch.amp.GradScaler):
        def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                     enabled=True, **kwargs: Any):
            super().__init__(device_type, init_scale=init_scale, growth_factor=growth_factor,
                             backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)

    amp.autocast = autocast
    amp.GradScaler = GradScaler
    amp.custom_fwd = functools.partial(torch.amp.custom_fwd, device_type=device_type)
    amp.custom_bwd = functools.partial(torch.amp.custom_bwd, device_type=device_type)
    return amp
