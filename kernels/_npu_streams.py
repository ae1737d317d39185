"""Streams and events of the emulated ``torch.npu``.

All work runs in order on the backing device, so streams need no scheduling of their own:
they and their contexts are no-ops apart from synchronising with the backing device, and events
time by the wall clock.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any, List

import torch

from .device import Patch

if TYPE_CHECKING:
    from .npu_api import EmulatedDeviceModule


class StreamMethods:
    """The stream functions of ``EmulatedDeviceModule``: one default stream that is always current."""

    _default_stream: "Stream"

    def current_stream(self, device: Any = None) -> "Stream":
        return self._default_stream

    default_stream = current_stream

    def set_stream(self, stream: "Stream") -> None:
        return None

    def stream(self, stream: "Stream") -> "StreamContext":
        return StreamContext(stream)

    def get_sync_debug_mode(self) -> int:
        return 0


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
