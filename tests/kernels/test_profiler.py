"""The emulated torch_npu.profiler keeps the real API's types: a half-migrated call (torch's
activities, schedule actions or experimental config) fails as it would on an NPU, and the trace
handler writes its output under the trace directory."""

import inspect
from pathlib import Path

import pytest
import torch

from npu_migrate import kernels
from npu_migrate.kernels import profiler


def _steps(prof, n=4):
    for _ in range(n):
        torch.randn(4, 4) @ torch.randn(4, 4)
        prof.step()


def test_a_scheduled_profile_writes_its_trace_under_the_directory(tmp_path):
    with kernels.emulate():
        with profiler.profile(activities=[profiler.ProfilerActivity.CPU, profiler.ProfilerActivity.NPU],
                              schedule=profiler.schedule(wait=1, warmup=1, active=1, repeat=1),
                              on_trace_ready=profiler.tensorboard_trace_handler(str(tmp_path), "rank0")) as prof:
            _steps(prof)
    traces = list(tmp_path.glob("rank0_*_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"))
    assert len(traces) == 1 and '"traceEvents"' in traces[0].read_text()


@pytest.mark.parametrize("arguments", [
    dict(activities=[torch.profiler.ProfilerActivity.CUDA]),
    dict(experimental_config=torch._C._profiler._ExperimentalConfig(verbose=True)),
])
def test_torch_types_are_refused(arguments):
    with pytest.raises(TypeError, match="torch_npu.profiler"):
        profiler.profile(**arguments)


def test_a_schedule_returning_torchs_actions_is_refused():
    with pytest.raises(TypeError, match="torch_npu.profiler.ProfilerAction"):
        profiler.profile(schedule=lambda step: torch.profiler.ProfilerAction.RECORD)


def test_the_schedule_cycles_like_torch_npus():
    cycle = profiler.schedule(wait=1, warmup=1, active=2, repeat=1, skip_first=1)
    actions = [cycle(step).name for step in range(7)]
    assert actions == ["NONE", "NONE", "WARMUP", "RECORD", "RECORD_AND_SAVE", "NONE", "NONE"]


def test_the_object_has_no_key_averages_and_export_chrome_trace_wants_json(tmp_path):
    prof = profiler.profile()
    assert not hasattr(prof, "key_averages") and not hasattr(prof, "events")
    with prof:
        torch.ones(2) + 1
    with pytest.raises(RuntimeError, match="json"):
        prof.export_chrome_trace(str(tmp_path / "trace.txt"))
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    assert Path(tmp_path / "trace.json").is_file()
    assert "experimental_config" in inspect.signature(profiler.profile).parameters
