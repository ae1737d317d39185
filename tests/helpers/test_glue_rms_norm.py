"""npu_glue's RMSNorm guard and call with mixed dtypes: torch_npu's npu_rms_norm takes a float16 /
bfloat16 x with a float32 gamma (documented and tested upstream; issue 10), so with
``mixed_dtype=True`` the guard accepts it, and ``rms_norm`` returns the dtype the original code
returns (the promotion of x's and the weight's: float32 for Llama's ``weight * normed.to(x.dtype)``),
so the fused kernel also runs under autocast."""

import pytest
import torch
from torch import nn

from npu_migrate.kernels._checks import NpuOpError
from tests.helpers.support import tolerance

API = "torch_npu.npu_rms_norm"
EPS = 1e-6


def llama_rms_norm(x, weight, eps=EPS):
    """Hugging Face LlamaRMSNorm.forward."""
    input_dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(input_dtype)


def documented_npu_rms_norm(x, gamma, epsilon=EPS):
    """opmap/reference/torch_npu_facts.md: rstd = rsqrt(mean(x.float()**2) + eps); y = (x.float() * rstd * gamma.float()).to(x.dtype)."""
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + epsilon)
    return (x.float() * rstd * gamma.float()).to(x.dtype), rstd


def emulator_takes_mixed_dtypes(glue):
    try:
        glue.torch_npu.npu_rms_norm(torch.ones(2, 4, dtype=torch.bfloat16), torch.ones(4))
    except NpuOpError:
        return False
    return True


@pytest.fixture
def mixed_kernel(glue):
    if not emulator_takes_mixed_dtypes(glue):
        pytest.skip("the emulated npu_rms_norm still refuses a float32 gamma with a float16/bfloat16 x "
                    "(the kernels branch makes it accept it, as torch_npu does)")


def test_guard_accepts_mixed_dtypes_only_when_asked(glue):
    w32 = torch.ones(8)
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(2, 3, 8).to(dtype)
        assert not glue.rms_norm_fits(x, w32)  # today's call sites return x's dtype: not for them
        assert glue.rms_norm_fits(x, w32, mixed_dtype=True)
        assert glue.rms_norm_fits(x, w32.to(dtype), mixed_dtype=True)
    assert not glue.rms_norm_fits(torch.randn(2, 8), torch.ones(8, dtype=torch.bfloat16), mixed_dtype=True)  # f32 x, bf16 w
    assert not glue.rms_norm_fits(torch.randn(2, 8).half(), torch.ones(8, dtype=torch.bfloat16), mixed_dtype=True)
    assert not glue.rms_norm_fits(torch.randn(2, 8).half(), torch.ones(4), mixed_dtype=True)  # not the normalised dim
    assert not glue.rms_norm_fits(torch.randn(2, 8).half(), None, mixed_dtype=True)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_result_has_the_originals_dtype(glue, monkeypatch, dtype):
    monkeypatch.setattr(glue.torch_npu, "npu_rms_norm", documented_npu_rms_norm)
    x, weight = torch.randn(2, 5, 8).to(dtype), torch.rand(8) + 0.5
    want = llama_rms_norm(x, weight)
    got = glue.rms_norm(x, weight, EPS)
    assert want.dtype == got.dtype == torch.float32
    torch.testing.assert_close(got, want, **tolerance(API, dtype))
    kept = glue.rms_norm(x, weight, EPS, dtype=x.dtype)  # for norms that end in .type_as(x)
    assert kept.dtype == dtype
    torch.testing.assert_close(kept, want.to(dtype), **tolerance(API, dtype))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mixed_dtypes_on_the_emulated_kernel(glue, mixed_kernel, dtype):
    x, weight = torch.randn(2, 5, 8).to(dtype), torch.rand(8) + 0.5
    assert glue.rms_norm_fits(x, weight, mixed_dtype=True)
    torch.testing.assert_close(glue.rms_norm(x, weight, EPS), llama_rms_norm(x, weight), **tolerance(API, dtype))


class Block(nn.Module):
    """A projection then an RMSNorm with a float32 weight: under autocast the norm sees a bfloat16 x."""

    def __init__(self, glue=None):
        super().__init__()
        self.proj, self.weight, self.glue = nn.Linear(8, 8), nn.Parameter(torch.rand(8) + 0.5), glue

    def forward(self, x):
        h = self.proj(x)
        if self.glue is not None and self.glue.rms_norm_fits(h, self.weight, mixed_dtype=True):
            return self.glue.rms_norm(h, self.weight, EPS)
        return llama_rms_norm(h, self.weight)


@pytest.mark.slow
def test_fused_under_autocast(glue, mixed_kernel, spy):
    torch.manual_seed(0)
    original = Block()
    migrated = Block(glue)
    migrated.load_state_dict(original.state_dict())
    x = torch.randn(2, 5, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want, got = original(x), migrated(x)
    assert spy["npu_rms_norm"] == 1 and got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, **tolerance(API, torch.bfloat16))
