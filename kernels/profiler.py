"""``torch_npu.profiler`` on the emulated device: torch_npu's profiler API over torch's CPU profiler.

The surface is the real one (torch_npu/profiler of the 2.x wheels, opmap/profiler.yaml): a
keyword-only ``profile`` whose activities, schedule actions and experimental config are
torch_npu's own types (torch's are refused with a TypeError, as a half-migrated call would fail on
an NPU), ``on_trace_ready`` handlers that receive the torch_npu profile object, and an object with
start/stop/step/export_chrome_trace/export_stacks/export_memory_timeline/add_metadata and no
``key_averages()``/``events()``. What is recorded is the backing device's (host operators; with a
CPU backing no device time), and ``tensorboard_trace_handler`` writes a Chrome trace to
``<dir>/<worker>_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json`` in place of the real parsed
output. Not emulated: dynamic_profile, ``analyse``, mstx.
"""

from __future__ import annotations

import enum
import json
import os
import socket
from typing import Any, Callable, Iterable, Optional

import torch

__all__ = ["profile", "schedule", "tensorboard_trace_handler", "ProfilerActivity", "ProfilerAction",
           "supported_activities", "_ExperimentalConfig", "ProfilerLevel", "AiCMetrics", "ExportType"]


class ProfilerActivity(enum.Enum):
    CPU = 0
    NPU = 1


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


class ProfilerLevel(enum.Enum):
    Level_none = -1
    Level0 = 0
    Level1 = 1
    Level2 = 2


class AiCMetrics(enum.Enum):
    AiCoreNone = 0
    PipeUtilization = 1
    ArithmeticUtilization = 2
    Memory = 3


class ExportType(enum.Enum):
    Text = "text"
    Db = "db"


class _ExperimentalConfig:
    def __init__(self, **settings: Any) -> None:
        self.settings = settings


def supported_activities():
    return {ProfilerActivity.CPU, ProfilerActivity.NPU}


class schedule:  # noqa: N801 - torch_npu exports its Schedule class under this name
    """torch_npu's Schedule: skip ``skip_first`` steps, then cycles of wait / warmup / active."""

    def __init__(self, wait: int, active: int, warmup: int = 0, repeat: int = 0, skip_first: int = 0,
                 skip_first_wait: int = 0) -> None:
        self.wait, self.active, self.warmup = wait, max(active, 1), warmup
        self.repeat, self.skip_first = repeat, skip_first + skip_first_wait

    def __call__(self, step: int) -> ProfilerAction:
        if step < self.skip_first:
            return ProfilerAction.NONE
        step -= self.skip_first
        cycle = self.wait + self.warmup + self.active
        if self.repeat > 0 and step // cycle >= self.repeat:
            return ProfilerAction.NONE
        at = step % cycle
        if at < self.wait:
            return ProfilerAction.NONE
        if at < self.wait + self.warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if at < cycle - 1 else ProfilerAction.RECORD_AND_SAVE


def tensorboard_trace_handler(dir_name: Optional[str] = None, worker_name: Optional[str] = None,
                              analyse_flag: bool = True, async_mode: bool = False) -> Callable[["profile"], None]:
    directory = dir_name or os.getcwd()
    worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"

    def handler(prof: "profile") -> None:
        prof._saves += 1
        out = os.path.join(directory, f"{worker}_{prof._saves}_ascend_pt", "ASCEND_PROFILER_OUTPUT")
        os.makedirs(out, exist_ok=True)
        prof.export_chrome_trace(os.path.join(out, "trace_view.json"))
        with open(os.path.join(out, "profiler_metadata.json"), "w", encoding="utf-8") as file:
            json.dump(prof._metadata, file)

    return handler


class profile:  # noqa: N801 - the real class name
    def __init__(self, *, activities: Optional[Iterable[ProfilerActivity]] = None,
                 schedule: Optional[Callable[[int], ProfilerAction]] = None,
                 on_trace_ready: Optional[Callable[..., Any]] = None, record_shapes: bool = False,
                 profile_memory: bool = False, with_stack: bool = False, with_flops: bool = False,
                 with_modules: bool = False, experimental_config: Optional[_ExperimentalConfig] = None,
                 use_cuda: Optional[bool] = None) -> None:
        activities = set(activities) if activities else supported_activities()
        strangers = [a for a in activities if not isinstance(a, ProfilerActivity)]
        if strangers:
            raise TypeError(f"activities must be torch_npu.profiler.ProfilerActivity members, got {strangers}")
        if experimental_config is not None and not isinstance(experimental_config, _ExperimentalConfig):
            raise TypeError("experimental_config must be torch_npu.profiler._ExperimentalConfig, "
                            f"got {type(experimental_config).__name__}")
        self.schedule, self.on_trace_ready = schedule, on_trace_ready
        self._metadata: dict = {}
        self._saves = 0
        self._torch = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], schedule=self._action if schedule else None,
            on_trace_ready=self._ready if on_trace_ready else None, record_shapes=record_shapes,
            profile_memory=profile_memory, with_stack=with_stack, with_flops=with_flops, with_modules=with_modules)

    def _action(self, step: int) -> torch.profiler.ProfilerAction:
        action = self.schedule(step)
        if not isinstance(action, ProfilerAction):
            raise TypeError(f"the schedule returned {action!r}: torch_npu's profile expects "
                            "torch_npu.profiler.ProfilerAction")
        return torch.profiler.ProfilerAction[action.name]

    def _ready(self, _torch_profile) -> None:
        self.on_trace_ready(self)

    def __enter__(self) -> "profile":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._torch.start()

    def stop(self) -> None:
        self._torch.stop()

    def step(self) -> None:
        self._torch.step()

    def export_chrome_trace(self, output_path: str) -> None:
        if not output_path.endswith(".json"):
            raise RuntimeError("Invalid parameter output_path, which must be a json file.")
        self._torch.export_chrome_trace(output_path)

    def export_stacks(self, output_path: str, metric: str = "self_cpu_time_total") -> None:
        if metric not in ("self_cpu_time_total", "self_npu_time_total"):
            metric = "self_cpu_time_total"  # the real one warns and falls back the same way
        self._torch.export_stacks(output_path, "self_cpu_time_total")

    def export_memory_timeline(self, output_path: str, device: Optional[str] = None) -> None:
        self._torch.export_memory_timeline(output_path, device="cpu")

    def add_metadata(self, key: str, value: str) -> None:
        self._metadata[key] = value

    def add_metadata_json(self, key: str, value: str) -> None:
        self._metadata[key] = json.loads(value)
