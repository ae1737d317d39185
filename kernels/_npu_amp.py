"""Automatic mixed precision of the emulated ``torch.npu``: the autocast and precision queries,
and the ``torch.npu.amp`` submodule."""

from __future__ import annotations

import functools
import types
from typing import Any, List

import torch


class AmpMethods:
    """The amp and precision functions of ``EmulatedDeviceModule`` (which sets ``_backing`` and
    ``_autocast_dtype``)."""

    _backing: torch.device
    _autocast_dtype: torch.dtype

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


def amp_module(name: str, backing: torch.device) -> types.ModuleType:
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
