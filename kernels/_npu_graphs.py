"""Graph capture on the emulated ``torch.npu``: not emulated. ``NPUGraph`` can be constructed,
but capturing, replaying and the graph functions raise ``NotEmulatedError``."""

from __future__ import annotations

from typing import Any


class NotEmulatedError(RuntimeError):
    """A torch_npu feature the emulator does not provide."""


class GraphMethods:
    """The graph functions of ``EmulatedDeviceModule`` (which sets ``_name``)."""

    _name: str

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


class Graph:
    """``NPUGraph``: constructing one works; capturing or replaying raises ``NotEmulatedError``."""

    _what: str

    def __init__(self, *args: Any, **kwargs: Any):
        return None

    def capture_begin(self, *args: Any, **kwargs: Any):
        _not_emulated(self._what)

    capture_end = replay = reset = pool = debug_dump = enable_debug_mode = capture_begin
