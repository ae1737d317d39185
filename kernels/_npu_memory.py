"""Memory statistics of the emulated ``torch.npu``: forwarded to ``torch.cuda`` with a CUDA
backing; with a CPU one the counters read 0 and ``mem_get_info`` reports host memory."""

from __future__ import annotations

import os
from typing import Any

import torch

# Memory counters: forwarded to torch.cuda with a CUDA backing, 0 with a CPU one.
_MEMORY_COUNTERS = (
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
)
_MEMORY_RESETS = ("reset_peak_memory_stats", "reset_accumulated_memory_stats", "reset_max_memory_allocated")


class MemoryMethods:
    """The memory functions of ``EmulatedDeviceModule`` (which sets ``_cuda``, ``_name`` and
    ``_index``); ``_install_memory_counters`` adds the per-name counters and their legacy aliases."""

    _cuda: bool
    _name: str

    def _install_memory_counters(self) -> None:
        for counter in _MEMORY_COUNTERS:
            setattr(self, counter, self._memory_counter(counter))
        for reset in _MEMORY_RESETS:
            setattr(self, reset, self._memory_counter(reset, result=None))
        self.memory_cached, self.max_memory_cached = self.memory_reserved, self.max_memory_reserved
        self.reset_max_memory_cached = self.reset_peak_memory_stats

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
        return torch.cuda.mem_get_info(self._index(device)) if self._cuda else host_memory()

    def get_per_process_memory_fraction(self, device: Any = None) -> float:
        return 1.0


def host_memory():
    """(free, total) bytes of host memory, the CPU backing's answer to ``mem_get_info``."""
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page
    except (ValueError, OSError, AttributeError):
        return 0, 0
