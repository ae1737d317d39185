"""Device rewrites never route an NPU into a CUDA-only path (issue 8 item 4): a module written for
CUDA — capability flags at import time, a Triton kernel behind ``x.is_cuda``, a float8 path behind
``device_type != "cuda"`` — is migrated, its original imported under ``kernels.emulate_cuda()`` and
the migrated copy under ``kernels.emulate()``, and their behaviour compared.

Under ``emulate()`` every tensor answers ``is_npu`` True, so a ``.is_cuda`` rewritten to ``.is_npu``
would enter the Triton branch (whose kernel does not exist here) and the test would fail."""

import importlib.util
import sys

import pytest
import torch

from npu_migrate import kernels
from tests import snippets

CUDA_MODULE = '''\
import torch

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None

USE_BF16 = torch.cuda.get_device_capability() >= (8, 0)
major, minor = torch.cuda.get_device_capability()
SM = major * 10 + minor
HAS_SM90 = torch.cuda.get_device_properties(0).major >= 9
DTYPE = torch.bfloat16 if USE_BF16 else torch.float16

if triton is not None:

    @triton.jit
    def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * 2, mask=offsets < n)


def double(x):
    if x.is_cuda:
        out = torch.empty_like(x)
        _double_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
    return x * 2


def triton_available(x):
    return x.is_cuda and triton is not None


class Linear8(torch.nn.Module):
    def __init__(self, features, device_type="cuda"):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.eye(features))
        self.use_fp8 = True
        if device_type != "cuda":
            self.use_fp8 = False

    def forward(self, x):
        if self.use_fp8:
            return torch._scaled_mm(x.to(torch.float8_e4m3fn), self.weight.to(torch.float8_e4m3fn).t(),
                                    scale_a=torch.ones(()), scale_b=torch.ones(()))
        return x.cuda() @ self.weight
'''


@pytest.fixture(scope="module")
def migrated():
    return snippets.migrate(CUDA_MODULE, "cuda_paths.py", select=["NPU1", "NPU2"], status="changed")


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


def test_the_naive_rename_breaks_at_import():
    """What NPU206 prevents: the renamed capability check raises on an NPU."""
    with kernels.emulate() as active:
        if not active:
            pytest.skip("a real torch_npu is installed")
        assert torch.npu.get_device_capability() is None
        with pytest.raises(TypeError):
            torch.npu.get_device_capability() >= (8, 0)


@pytest.mark.slow
def test_migrated_text_keeps_cuda_only_paths_cuda_only(migrated):
    text = migrated.migrated
    assert "USE_BF16 = False\n" in text and "major, minor = (0, 0)\n" in text and "HAS_SM90 = False\n" in text
    assert "if x.is_cuda:" in text and "return x.is_cuda and triton" in text  # kept
    assert 'if device_type != "cuda":' in text and 'device_type="npu"' in text  # gate kept, default moved
    assert "x.npu() @ self.weight" in text
    codes = {(f.code, f.action) for f in migrated.findings}
    assert ("NPU206", "rewritten") in codes and ("NPU207", "reported") in codes
    kept = [f for f in migrated.findings if f.code == "NPU207"]
    assert [f.line for f in kept] == [24, 32, 40]


def test_original_under_cuda_and_migrated_under_npu(migrated, tmp_path):
    (tmp_path / "cuda_paths.py").write_text(CUDA_MODULE)
    (tmp_path / "npu_paths.py").write_text(migrated.migrated)
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    with kernels.emulate_cuda():
        original = load(tmp_path / "cuda_paths.py", "cuda_paths")
        assert original.USE_BF16 and original.SM == 80 and original.DTYPE is torch.bfloat16
        assert original.Linear8(3).use_fp8  # the float8 path is the CUDA path
        expected = original.double(x)
    with kernels.emulate() as active:
        if not active:
            pytest.skip("a real torch_npu is installed")
        module = load(tmp_path / "npu_paths.py", "npu_paths")  # imports: no TypeError at import time
        assert (module.USE_BF16, module.SM, module.HAS_SM90, module.DTYPE) == (False, 0, False, torch.float16)
        assert torch.equal(module.double(x), expected)  # the torch path, not the Triton kernel
        assert module.triton_available(x) is False
        layer = module.Linear8(3)
        assert layer.use_fp8 is False  # the gate keeps float8 off a device that is not CUDA
        assert torch.equal(layer(x), x @ torch.eye(3))
