"""NPU320 (RMSNorm; SwiGLU and MoE gating: test_swiglu_rules.py, test_moe_gating_rules.py): the
migrated code computes what the original computes under the emulated NPU, in float32 and bfloat16, with the weight dtype equal to or
different from the input's, in inference and training. Each snippet is migrated with only its rule
selected, both versions are executed, and the fused kernel is counted to show which path ran."""

import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from npu_migrate import kernels
from npu_migrate.migrate.engine import build_engine
from npu_migrate.opmap import load_table

HELPERS = Path(__file__).resolve().parents[2] / "migrate" / "helpers"
TABLE = load_table()

RMS_NORMS = '''
import torch
import torch.nn.functional as F
from torch import nn


class LlamaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class T5LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


class MetaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


class ScaleRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        orig_dtype = x.dtype
        x = x.float()
        inv_rms = torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)
        return (x * inv_rms).to(orig_dtype) * self.scale


class PowNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return x * (x.square().mean(dim=-1, keepdim=True) + 1e-6).pow(-0.5) * self.weight


class NoWeightNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))  # unused: the norm has no weight

    def forward(self, x):
        return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-6)


class FunctionalNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.shape = (dim,)

    def forward(self, x):
        return F.rms_norm(x, self.shape, self.weight)


class GemmaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(dim) * 0.1)

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)
'''

def migrate(source: str, code: str) -> str:
    result = build_engine(TABLE, select=[code]).migrate("snippet.py", source.encode())
    assert result.status == "changed", (result.status, result.error, result.findings)
    assert all(f.code == code for f in result.findings), result.findings
    return result.migrated


@pytest.fixture(scope="module")
def npu():
    """The emulated NPU, with the helper module importable as the vendored ``npu_glue``."""
    sys.path.insert(0, str(HELPERS))
    try:
        with kernels.emulate():
            yield sys.modules["torch_npu"]
            sys.modules.pop("npu_glue", None)
    finally:
        sys.path.remove(str(HELPERS))


def load(source: str, **extra) -> dict:
    namespace = dict(extra)
    exec(compile(source, "<snippet>", "exec"), namespace)
    return namespace


@contextmanager
def counting(module, op):
    """Counts calls of ``torch_npu.<op>`` made inside the block."""
    original, calls = getattr(module, op), []

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    setattr(module, op, counted)
    try:
        yield calls
    finally:
        setattr(module, op, original)


def tolerance(op: str, dtype: torch.dtype):
    record = TABLE.get(f"torch_npu.{op}").tolerance[str(dtype).replace("torch.", "")]
    return dict(rtol=record.rtol, atol=record.atol)


def twins(original_ns, migrated_ns, name, *args, dtype=None):
    """The class ``name`` built from both sources with the same weights."""
    torch.manual_seed(0)
    before = original_ns[name](*args)
    after = migrated_ns[name](*args)
    after.load_state_dict(before.state_dict())
    if dtype is not None:
        before, after = before.to(dtype), after.to(dtype)
    return before, after


# -- RMSNorm ------------------------------------------------------------------------------------
NORMS = ["LlamaRMSNorm", "T5LayerNorm", "MetaRMSNorm", "ScaleRMSNorm", "PowNorm", "NoWeightNorm", "FunctionalNorm"]


@pytest.fixture(scope="module")
def norms(npu):
    migrated = migrate(RMS_NORMS, "NPU320")
    assert migrated.count("torch_npu.npu_rms_norm(") == len(NORMS)
    assert migrated.count("torch_npu.npu_gemma_rms_norm(") == 1
    return load(RMS_NORMS), load(migrated)


@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("x_dtype,w_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                             (torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16)])
def test_rms_norm_forms_match_the_original(npu, norms, name, x_dtype, w_dtype):
    before, after = twins(*norms, name, 16, dtype=w_dtype)
    x = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(1)).to(x_dtype)
    with counting(npu, "npu_rms_norm") as calls:
        got = after(x)
    want = before(x)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.float(), want.float(), **tolerance("npu_rms_norm", x_dtype))
    fused = x_dtype == w_dtype or name == "NoWeightNorm"
    assert len(calls) == (1 if fused else 0), "the fast path runs exactly when the dtypes agree"


@pytest.mark.parametrize("name", ["LlamaRMSNorm", "T5LayerNorm", "MetaRMSNorm"])
def test_rms_norm_gradients_match(npu, norms, name):
    before, after = twins(*norms, name, 16)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(2))
    grads = []
    for model in (before, after):
        xi = x.clone().requires_grad_()
        model(xi).square().sum().backward()
        grads.append((xi.grad, model.weight.grad))
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, **tolerance("npu_rms_norm", torch.float32))


def test_rms_norm_one_dimensional_input_falls_back(npu, norms):
    before, after = twins(*norms, "LlamaRMSNorm", 16)
    x = torch.randn(16)
    with counting(npu, "npu_rms_norm") as calls:
        torch.testing.assert_close(after(x), before(x))
    assert not calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemma_norm_is_fused_only_without_autograd(npu, norms, dtype):
    before, after = twins(*norms, "GemmaRMSNorm", 16, dtype=dtype)
    x = torch.randn(2, 16, generator=torch.Generator().manual_seed(3)).to(dtype)
    with counting(npu, "npu_gemma_rms_norm") as calls, torch.no_grad():
        got = after(x)
    assert len(calls) == 1
    torch.testing.assert_close(got.float(), before(x).float(), **tolerance("npu_gemma_rms_norm", dtype))
    with counting(npu, "npu_gemma_rms_norm") as calls:
        after(x.requires_grad_()).sum().backward()  # the kernel has no backward: the original runs
    assert not calls and after.weight.grad is not None
