"""The emulated ``torch.npu`` surface, the fake ``torch_npu`` package and hccl on gloo."""

from __future__ import annotations

import importlib.util
import sys
import time

import pytest
import torch
import torch.distributed as dist

from npu_migrate import kernels
from npu_migrate.kernels.distributed import map_backend
from npu_migrate.kernels.device import DeviceMap
from npu_migrate.kernels.npu_api import NotEmulatedError
from npu_migrate.kernels.registry import load_all

BACKINGS = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=BACKINGS)
def npu(request):
    with kernels.emulate(request.param):
        yield request.param


def test_device_functions(npu):
    api = torch.npu
    assert api.is_available() and api.is_initialized()
    assert api.device_count() >= 1
    api.set_device(0)
    api.set_device("npu:0")
    assert api.current_device() == 0
    with api.device(0):
        assert api.current_device() == 0
    with api.device_of(torch.ones(1, device="npu")):
        pass
    assert "emulated" in api.get_device_name() and api.get_device_name(0) == api.get_device_name()
    assert api.get_device_capability() is None, "torch.npu answers None, as the real one does"
    assert api.get_device_properties(0).total_memory > 0
    api.synchronize()
    api.synchronize(0)
    assert api.utilization() == 0
    assert api.is_bf16_supported()
    assert torch.float16 in api.get_amp_supported_dtype()


def test_random_state(npu):
    torch.npu.manual_seed(7)
    assert torch.npu.initial_seed() == 7
    state = torch.npu.get_rng_state()
    first = torch.randn(4, device="npu")
    torch.npu.set_rng_state(state)
    assert torch.equal(first, torch.randn(4, device="npu"))
    states = torch.npu.get_rng_state_all()
    second = torch.rand(2, device="npu")
    torch.npu.set_rng_state_all(states)
    assert torch.equal(second, torch.rand(2, device="npu"))
    torch.npu.manual_seed_all(1)
    torch.npu.seed()
    torch.npu.seed_all()


def test_memory_functions(npu):
    api = torch.npu
    for counter in (api.memory_allocated, api.max_memory_allocated, api.memory_reserved, api.max_memory_reserved):
        assert counter() >= 0 and counter(0) >= 0
    api.reset_peak_memory_stats()
    api.reset_max_memory_allocated()
    api.empty_cache()
    assert isinstance(api.memory_stats(), dict)
    assert isinstance(api.memory_summary(), str)
    free, total = api.mem_get_info()
    assert 0 <= free <= total


def test_streams_and_events(npu):
    stream = torch.npu.Stream()
    assert torch.npu.current_stream() is torch.npu.default_stream()
    with torch.npu.stream(stream):
        torch.ones(3, device="npu").sum()
    stream.synchronize()
    assert stream.query()
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    start.record()
    time.sleep(0.01)
    end.record(stream)
    end.synchronize()
    assert start.elapsed_time(end) >= 5.0
    assert isinstance(stream.record_event(), torch.npu.Event)
    with pytest.raises(RuntimeError, match="enable_timing"):
        torch.npu.Event().elapsed_time(torch.npu.Event())


def test_autocast_defaults_to_float16(npu):
    linear = torch.nn.Linear(4, 4).npu()
    x = torch.randn(2, 4, device="npu")
    for context in (torch.npu.amp.autocast(), torch.autocast("npu"), torch.amp.autocast(device_type="npu")):
        with context:
            assert linear(x).dtype == torch.float16
            assert torch.npu.is_autocast_enabled()
    with torch.autocast("npu", dtype=torch.bfloat16):
        assert linear(x).dtype == torch.bfloat16
    with torch.npu.amp.autocast(enabled=False):
        assert linear(x).dtype == torch.float32
    torch.npu.set_autocast_dtype(torch.bfloat16)
    with torch.autocast("npu"):
        assert linear(x).dtype == torch.bfloat16
    assert torch.npu.get_autocast_dtype() == torch.bfloat16


def test_custom_fwd_on_npu(npu):
    class Double(torch.autograd.Function):
        @staticmethod
        @torch.npu.amp.custom_fwd(cast_inputs=torch.float32)
        def forward(ctx, x):
            return x * 2

        @staticmethod
        @torch.npu.amp.custom_bwd
        def backward(ctx, grad):
            return grad * 2

    x = torch.ones(2, device="npu", dtype=torch.float16, requires_grad=True)
    with torch.npu.amp.autocast():
        y = Double.apply(x)
    assert y.dtype == torch.float32


def test_grad_scaler(npu):
    model = torch.nn.Linear(4, 1).npu()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for scaler in (torch.npu.amp.GradScaler(init_scale=8.0), torch.amp.GradScaler("npu", init_scale=8.0)):
        with torch.npu.amp.autocast():
            loss = model(torch.randn(3, 4, device="npu")).float().sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        assert scaler.get_scale() == 8.0


def test_flags_settings_and_tensor_types(npu):
    torch.npu.matmul.allow_hf32 = True
    torch.npu.conv.allow_hf32 = False
    torch.npu.set_compile_mode(jit_compile=False)
    torch.npu.set_option({"ACL_OP_COMPILER_CACHE_MODE": "enable"})
    x = torch.npu.FloatTensor(2, 3)
    assert x.shape == (2, 3) and x.dtype == torch.float32 and x.is_npu
    assert isinstance(x, torch.npu.FloatTensor) and not isinstance(x, torch.npu.HalfTensor)
    assert torch.npu.HalfTensor([1.0]).dtype == torch.float16
    assert torch.npu.BFloat16Tensor([1.0]).dtype == torch.bfloat16


def test_graphs_are_not_emulated(npu):
    graph = torch.npu.NPUGraph()
    with pytest.raises(NotEmulatedError, match="not emulated"):
        graph.capture_begin()
    with pytest.raises(NotEmulatedError):
        graph.replay()
    with pytest.raises(NotEmulatedError):
        torch.npu.graph(graph)
    assert torch.npu.is_current_stream_capturing() is False


def test_unknown_names_say_they_are_not_emulated(npu):
    with pytest.raises(AttributeError, match=r"torch\.npu\.no_such_api is not emulated"):
        torch.npu.no_such_api
    assert "synchronize" in dir(torch.npu) and "FloatTensor" in dir(torch.npu)


# --------------------------------------------------------------------------- torch_npu


def test_torch_npu_module(npu):
    import torch_npu
    from torch_npu.contrib import transfer_to_npu  # noqa: F401
    from torch_npu.optim import NpuFusedAdamW

    from npu_migrate.kernels import optim

    assert torch_npu.npu is torch.npu and sys.modules["torch_npu.npu"] is torch.npu
    assert torch_npu.__version__.startswith("2.14.0") and torch_npu.emulated
    assert importlib.util.find_spec("torch_npu") is not None
    assert NpuFusedAdamW is optim.NpuFusedAdamW and torch_npu.optim.NpuFusedAdamW is optim.NpuFusedAdamW
    ops = load_all()
    assert ops and all(getattr(torch_npu, name) is getattr(torch.ops.npu, name) for name in ops)
    assert set(ops) <= set(dir(torch_npu))
    from torch_npu import npu_rms_norm  # noqa: F401
    with pytest.raises(AttributeError, match="not emulated"):
        torch_npu.npu_no_such_op
    from torch_npu.npu import amp

    assert amp is torch.npu.amp


def test_torch_npu_ops_run_on_the_device(npu):
    import torch_npu

    x = torch.randn(2, 8, device="npu")
    gamma = torch.ones(8, device="npu")
    y, rstd = torch_npu.npu_rms_norm(x, gamma, epsilon=1e-6)
    assert y.device.type == npu and y.shape == x.shape


# --------------------------------------------------------------------------- distributed


@pytest.mark.parametrize(
    "backend, expected",
    [("hccl", "gloo"), ("HCCL", "gloo"), ("gloo", "gloo"), ("cpu:gloo,npu:hccl", "cpu:gloo"), (None, None)],
)
def test_map_backend(backend, expected):
    assert map_backend(backend, DeviceMap("npu", torch.device("cpu"))) == expected


def test_hccl_process_group_runs_on_gloo(tmp_path):
    with kernels.emulate():
        assert dist.is_hccl_available()
        dist.init_process_group("hccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1,
                                device_id=torch.device("npu:0"))
        try:
            assert dist.get_world_size() == 1 and dist.get_backend() == "gloo"
            x = torch.arange(3.0, device="npu")
            dist.all_reduce(x)
            assert torch.equal(x, torch.arange(3.0)) and x.is_npu
            group = dist.new_group(backend="hccl")
            dist.all_reduce(x, group=group)
        finally:
            dist.destroy_process_group()
    assert not hasattr(dist, "is_hccl_available")


def test_nccl_process_group_runs_on_gloo_under_emulate_cuda(tmp_path):
    with kernels.emulate_cuda():
        dist.init_process_group(backend="nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
        try:
            x = torch.ones(2, device="cuda")
            dist.all_reduce(x)
            assert torch.equal(x, torch.ones(2))
        finally:
            dist.destroy_process_group()


def test_ddp_device_ids_are_dropped_on_a_cpu_backing(monkeypatch):
    """DDP on CPU refuses device_ids; the emulator drops them (a recording stub stands in for DDP,
    whose first construction imports torch._dynamo, far too slow for this suite)."""
    calls = []

    def record(self, module, device_ids=None, output_device=None):
        calls.append((device_ids, output_device))

    monkeypatch.setattr(torch.nn.parallel.DistributedDataParallel, "__init__", record)
    with kernels.emulate():
        torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1).npu(), device_ids=[0], output_device=0)
        torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1), ["npu:0"])
    assert calls == [(None, None), (None, None)]


def test_record_stream_accepts_emulated_streams(npu):
    x = torch.ones(2, device="npu")
    x.record_stream(torch.npu.current_stream())
