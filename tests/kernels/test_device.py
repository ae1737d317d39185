"""The emulated device: device mapping, the patch table, entering and leaving the emulation."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from npu_migrate import kernels
from npu_migrate.kernels import emulation
from npu_migrate.kernels.device import DeviceMap, Patch, PatchSet, own_value, replace

REPO = Path(__file__).resolve().parents[2]
BACKINGS = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
CPU = torch.device("cpu")


@pytest.fixture(params=BACKINGS)
def npu(request):
    """The emulated NPU on each available backing; yields the backing device type."""
    with kernels.emulate(request.param) as active:
        assert active
        yield request.param


def _own(patch: Patch):
    return own_value(patch.owner, patch.name)


# --------------------------------------------------------------------------- DeviceMap


@pytest.mark.parametrize(
    "value, expected",
    [("npu", "cpu"), ("npu:3", "cpu"), ("cpu", "cpu"), ("npux", "npux"), ("cuda:0", "cuda:0"), (1.5, 1.5)],
)
def test_device_map_strings_on_cpu(value, expected):
    assert DeviceMap("npu", CPU).map(value) == expected


def test_device_map_keeps_the_index_on_cuda():
    dmap = DeviceMap("npu", torch.device("cuda"))
    assert dmap.map("npu:1") == "cuda:1"
    assert dmap.map("npu") == "cuda"
    assert dmap.map(2, ints=True) == torch.device("cuda", 2)


def test_device_map_ints_and_containers_only_when_asked():
    dmap = DeviceMap("npu", CPU)
    assert dmap.map(0) == 0
    assert dmap.map(0, ints=True) == CPU
    assert dmap.map(True, ints=True) is True
    assert dmap.map(["npu:0"]) == ["npu:0"]
    assert dmap.map(["npu:0", 1], ints=True, deep=True) == ["cpu", CPU]
    assert dmap.map({"npu:0": "npu:1"}, deep=True) == {"cpu": "cpu"}


# --------------------------------------------------------------------------- PatchSet


class _Base:
    def method(self):
        return "base"


class _Child(_Base):
    pass


def test_patchset_restores_attributes_items_and_inherited_methods():
    owner_dict = {"kept": 1}
    patches = PatchSet(
        [
            replace(owner_dict, "kept", 2),
            replace(owner_dict, "added", 3),
            Patch(_Child, "method", lambda original: lambda self: "patched " + original(self)),
            replace(_Child, "new_attr", 4),
        ]
    )
    patches.apply()
    assert owner_dict == {"kept": 2, "added": 3}
    assert _Child().method() == "patched base" and _Child.new_attr == 4
    patches.restore()
    assert owner_dict == {"kept": 1}
    assert "method" not in vars(_Child) and _Child().method() == "base"
    assert not hasattr(_Child, "new_attr")


def test_patchset_rolls_back_when_a_patch_fails():
    owner = {"a": 1}

    def fail(_original):
        raise ValueError("boom")

    patches = PatchSet([replace(owner, "a", 2), Patch(owner, "b", fail)])
    with pytest.raises(ValueError):
        patches.apply()
    assert owner == {"a": 1}


# --------------------------------------------------------------------------- enter and leave


def test_emulate_restores_every_patched_entry_point():
    table = emulation._npu_patches(CPU)
    before = [(p.owner, p.name, _own(p)) for p in table]
    assert len(table) > 60 and not hasattr(torch, "npu")
    with kernels.emulate() as active:
        assert active and kernels.is_emulated() and not kernels.is_emulated("cuda")
        import torch_npu  # noqa: F401

        changed = [(o, n) for o, n, v in before if _own(Patch(o, n, None)) is not v]
        assert len(changed) == len(table)
    after = [(p.owner, p.name, _own(p)) for p in table]
    assert all(a[2] is b[2] for a, b in zip(after, before))
    assert not hasattr(torch, "npu") and not hasattr(torch.Tensor, "is_npu")
    assert not {m for m in sys.modules if m.startswith(("torch_npu", "torch.npu"))}
    assert torch.device is emulation.REAL_DEVICE and not kernels.is_emulated()
    with pytest.raises(RuntimeError):
        torch.device("npu")


def test_emulate_restores_after_an_exception():
    with pytest.raises(KeyError):
        with kernels.emulate():
            raise KeyError("x")
    assert not hasattr(torch, "npu") and not kernels.is_emulated()


def test_activate_deactivate_and_nesting():
    assert kernels.activate() is True
    try:
        with kernels.emulate():
            assert kernels.is_emulated()
        assert kernels.is_emulated(), "leaving a nested emulate() keeps the outer one"
        with pytest.raises(RuntimeError, match="leave it before"):
            kernels.activate_cuda()
    finally:
        kernels.deactivate()
    assert not kernels.is_emulated()
    kernels.deactivate()  # no-op when nothing is active


def test_rejects_unknown_or_missing_backings():
    with pytest.raises(ValueError):
        kernels.activate("mps")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            kernels.activate("cuda")


@pytest.mark.slow
def test_real_torch_npu_wins(tmp_path):
    """A real torch_npu (a dummy package here) is left in place: emulate() changes nothing."""
    package = tmp_path / "torch_npu"
    package.mkdir()
    (package / "__init__.py").write_text("REAL = True\n")
    script = textwrap.dedent(
        """
        import warnings, torch, kernels
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with kernels.emulate() as active:
                import torch_npu
                print(active, torch_npu.REAL, hasattr(torch, "npu"), kernels.is_emulated())
        print(any("real torch_npu" in str(w.message) for w in caught))
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True", "False", "False", "True"]


# --------------------------------------------------------------------------- the "npu" device


def test_torch_device_parses_npu(npu):
    for device in (torch.device("npu:0"), torch.device("npu", 0), torch.device(type="npu"), torch.device("npu")):
        assert isinstance(device, torch.device) and device.type == npu
    assert isinstance(torch.device("cpu"), torch.device)
    assert torch.device(torch.device("cpu")) == CPU


FACTORIES = {
    "zeros": lambda d: torch.zeros(2, 3, device=d),
    "ones": lambda d: torch.ones(2, device=d),
    "empty": lambda d: torch.empty(2, device=d),
    "randn": lambda d: torch.randn(2, device=d),
    "rand": lambda d: torch.rand(2, device=d),
    "arange": lambda d: torch.arange(4, device=d),
    "full": lambda d: torch.full((2,), 1.5, device=d),
    "tensor": lambda d: torch.tensor([1.0, 2.0], device=d),
    "as_tensor": lambda d: torch.as_tensor([1, 2], device=d),
    "zeros_like": lambda d: torch.zeros_like(torch.ones(2), device=d),
    "ones_like": lambda d: torch.ones_like(torch.ones(2), device=d),
    "empty_like": lambda d: torch.empty_like(torch.ones(2), device=d),
    "rand_like": lambda d: torch.rand_like(torch.ones(2), device=d),
    "randn_like": lambda d: torch.randn_like(torch.ones(2), device=d),
    "full_like": lambda d: torch.full_like(torch.ones(2), 7.0, device=d),
    "randint_like": lambda d: torch.randint_like(torch.ones(2), 5, device=d),
    "eye": lambda d: torch.eye(3, device=d),
    "linspace": lambda d: torch.linspace(0, 1, 5, device=d),
    "logspace": lambda d: torch.logspace(0, 1, 5, device=d),
    "randint": lambda d: torch.randint(0, 5, (3,), device=d),
    "randperm": lambda d: torch.randperm(4, device=d),
    "empty_strided": lambda d: torch.empty_strided((2, 2), (2, 1), device=d),
    "scalar_tensor": lambda d: torch.scalar_tensor(1.0, device=d),
    "tril_indices": lambda d: torch.tril_indices(3, 3, device=d),
    "triu_indices": lambda d: torch.triu_indices(3, 3, device=d),
    "normal": lambda d: torch.normal(0.0, 1.0, (2,), device=d),
    "hann_window": lambda d: torch.hann_window(4, device=d),
    "fftfreq": lambda d: torch.fft.fftfreq(4, device=d),
    "new_zeros": lambda d: torch.ones(1).new_zeros(2, device=d),
    "new_ones": lambda d: torch.ones(1).new_ones(2, device=d),
    "new_full": lambda d: torch.ones(1).new_full((2,), 3.0, device=d),
    "new_empty": lambda d: torch.ones(1).new_empty(2, device=d),
    "new_tensor": lambda d: torch.ones(1).new_tensor([1.0], device=d),
    "nn.Linear": lambda d: torch.nn.Linear(2, 2, device=d).weight,
}


@pytest.mark.parametrize("spec", ["npu", "npu:0", "device", 0])
@pytest.mark.parametrize("factory", sorted(FACTORIES))
def test_factories_accept_npu(npu, factory, spec):
    device = torch.device("npu", 0) if spec == "device" else spec
    assert FACTORIES[factory](device).device.type == npu


def test_moving_tensors_and_modules(npu):
    x = torch.ones(2)
    for moved in (x.npu(), x.npu(0), x.npu("npu:0"), x.to("npu"), x.to("npu:0"), x.to(torch.device("npu", 0)),
                  x.to(device="npu"), x.to("npu", torch.float16), x.to(0)):
        assert moved.device.type == npu
    assert x.to("npu", torch.float16).dtype == torch.float16
    model = torch.nn.Linear(2, 2)
    for move in (lambda m: m.npu(), lambda m: m.to("npu"), lambda m: m.to(torch.device("npu:0")), lambda m: m.npu(0)):
        assert move(model) is model and model.weight.device.type == npu
    model.to_empty(device="npu")
    assert model.weight.device.type == npu


def test_tensor_npu_refuses_other_devices():
    with kernels.emulate():
        with pytest.raises(RuntimeError, match="not an npu device"):
            torch.ones(1).npu("meta")


def test_is_npu_is_true_for_backing_tensors_while_emulating(npu):
    assert torch.zeros(1, device="npu").is_npu
    assert torch.nn.Parameter(torch.zeros(1, device="npu")).is_npu
    assert torch.zeros(1, device="meta").is_npu is False
    if npu == "cuda":
        assert torch.zeros(1).is_npu is False


def test_torch_load_map_location(npu, tmp_path):
    path = tmp_path / "state.pt"
    torch.save({"w": torch.arange(3.0)}, path)
    for location in ("npu", "npu:0", torch.device("npu", 0), {"cpu": "npu:0"}):
        assert torch.load(path, map_location=location)["w"].device.type == npu
    buffer = io.BytesIO()
    torch.save(torch.ones(1, device="npu"), buffer)
    buffer.seek(0)
    assert torch.load(buffer, "npu").device.type == npu


def test_default_device_and_generator(npu):
    with torch.device("npu"):
        assert torch.zeros(1).device.type == npu
    torch.set_default_device("npu")
    try:
        assert torch.zeros(1).device.type == npu
    finally:
        torch.set_default_device(None)
    generator = torch.Generator(device="npu").manual_seed(3)
    assert isinstance(generator, torch.Generator) and generator.device.type == npu
    assert isinstance(torch.default_generator, torch.Generator)
    first = torch.randn(3, generator=generator, device="npu")
    assert torch.equal(first, torch.randn(3, generator=torch.Generator("npu").manual_seed(3), device="npu"))


def test_get_device_module(npu):
    assert torch.get_device_module("npu") is torch.npu
    assert torch.get_device_module(torch.device("npu:0")) is torch.get_device_module(npu)
    assert torch.get_device_module("cpu") is torch.cpu


def test_random_fork_rng_on_npu(npu):
    torch.npu.manual_seed(0)
    with torch.random.fork_rng(device_type="npu"):
        torch.randn(3, device="npu")
    assert torch.npu.initial_seed() == 0


# --------------------------------------------------------------------------- emulate_cuda


def test_emulate_cuda_runs_cuda_code_on_cpu():
    original = torch.cuda.is_available, torch.cuda.synchronize, torch.Tensor.cuda
    with kernels.emulate_cuda() as active:
        assert active and kernels.is_emulated("cuda") and not kernels.is_emulated("npu")
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        x = torch.ones(2).cuda()
        assert x.device == CPU and not x.is_cuda, "is_cuda keeps its real meaning"
        assert torch.zeros(2, device="cuda:0").device == CPU
        assert torch.nn.Linear(2, 2).cuda().weight.device == CPU
        assert torch.ones(1).to(torch.device("cuda")).device == CPU
        torch.cuda.synchronize()
        torch.cuda.manual_seed_all(0)
        torch.manual_seed(0)  # calls torch.cuda.manual_seed_all, which must not recurse
        assert torch.cuda.get_rng_state().dtype == torch.uint8
        with torch.cuda.device(0):
            assert torch.cuda.current_device() == 0
        assert isinstance(torch.cuda.FloatTensor(2), torch.cuda.FloatTensor)
    assert (torch.cuda.is_available, torch.cuda.synchronize, torch.Tensor.cuda) == original
    assert not hasattr(torch, "npu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_emulate_cuda_does_nothing_with_a_cuda_backing():
    with kernels.emulate_cuda("cuda") as active:
        assert active is False and not kernels.is_emulated("cuda")
