import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import npu_migrate.kernels.activations as act
from npu_migrate.kernels._checks import NpuOpError
from npu_migrate.kernels.activations import fast_gelu, npu_fast_gelu, npu_geglu, npu_gelu, npu_swiglu
from tests.kernels import golden
from tests.tolerances import DTYPES, assert_close


class LlamaMLP(nn.Module):
    """The Hugging Face LlamaMLP with hidden_act='silu'."""

    def __init__(self, hidden=16, inter=24):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_swiglu_replaces_llama_mlp(dtype):
    torch.manual_seed(0)
    mlp = LlamaMLP().to(dtype)
    x = torch.randn(2, 3, 16).to(dtype)
    with torch.no_grad():
        gate_up = F.linear(x, torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))  # gate FIRST
        fused = mlp.down_proj(npu_swiglu(gate_up, dim=-1))
        assert_close(fused, mlp(x), "npu_swiglu")
        swapped = mlp.down_proj(npu_swiglu(F.linear(x, torch.cat([mlp.up_proj.weight, mlp.gate_proj.weight]))))
        assert not torch.allclose(swapped.float(), fused.float(), atol=1e-2)


def test_swiglu_other_dim_and_shape():
    x = torch.randn(6, 5)
    out = npu_swiglu(x, dim=0)
    assert out.shape == (3, 5)
    torch.testing.assert_close(out, F.silu(x[:3]) * x[3:])


def test_swiglu_gradients_match_reference():
    x = torch.randn(4, 10, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    grad = torch.randn(4, 5)
    npu_swiglu(x).backward(grad)
    a, b = x_ref.chunk(2, -1)
    (a * torch.sigmoid(a) * b).backward(grad)
    torch.testing.assert_close(x.grad, x_ref.grad)


@pytest.mark.parametrize("x, message", [
    (torch.randn(4, 7), "even"),
    (torch.randn(4, 8, dtype=torch.float64), "float64"),
    (torch.randn(4, 8).to(torch.int32), "dtype int32"),
])
def test_swiglu_constraints(x, message):
    with pytest.raises(NpuOpError, match=message):
        npu_swiglu(x)


@pytest.mark.parametrize("x", [
    torch.randn(8, 4).t(),                 # transposed
    torch.randn(4, 16)[:, ::2],            # strided
    torch.randn(2, 3, 8).permute(1, 0, 2),
], ids=["transposed", "strided", "permuted"])
def test_swiglu_refuses_non_contiguous_input(x):
    assert not x.is_contiguous()
    with pytest.raises(NpuOpError, match="must be contiguous"):
        npu_swiglu(x)
    torch.testing.assert_close(npu_swiglu(x.contiguous()), golden.swiglu(x))


@pytest.mark.parametrize("shape", [(0, 8), (4, 0), (2, 0, 6)])
def test_swiglu_refuses_empty_input(shape):
    with pytest.raises(NpuOpError, match="must not be empty"):
        npu_swiglu(torch.randn(shape))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [-1, 0, 1, 3])
def test_swiglu_matches_golden(dtype, dim):
    """The doc example's shape [2, 32, 6, 6], split along each dim."""
    x = torch.randn(2, 32, 6, 6).to(dtype)
    out = npu_swiglu(x, dim=dim)
    assert out.dtype == dtype and out.shape[dim] == x.shape[dim] // 2
    assert_close(out, golden.swiglu(x, dim), "npu_swiglu")


def tanh_gelu(x):
    """The textbook tanh approximation."""
    return 0.5 * x * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (x + 0.044715 * x ** 3)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_geglu_default_activates_right_half_with_tanh(dtype):
    x = torch.randn(3, 16).to(dtype)
    a, b = x.float().chunk(2, -1)
    out, gelu_half = npu_geglu(x)
    assert out.shape == gelu_half.shape == (3, 8) and out.dtype == gelu_half.dtype == dtype
    assert_close(out, (a * tanh_gelu(b)).to(dtype), "npu_geglu")
    assert_close(gelu_half, tanh_gelu(b).to(dtype), "npu_geglu")


def test_geglu_activate_left_and_erf():
    x = torch.randn(3, 16)
    a, b = x.chunk(2, -1)
    erf_gelu = lambda t: 0.5 * t * (1 + torch.erf(t / 2 ** 0.5))  # noqa: E731
    torch.testing.assert_close(npu_geglu(x, activate_left=True)[0], tanh_gelu(a) * b)
    torch.testing.assert_close(npu_geglu(x, approximate=0)[0], a * erf_gelu(b))
    with pytest.raises(NpuOpError, match="approximate"):
        npu_geglu(x, approximate=2)


def test_geglu_half_order_is_configurable(monkeypatch):
    x = torch.randn(3, 16)
    a, b = x.chunk(2, -1)
    monkeypatch.setattr(act, "GEGLU_DEFAULT_ACTIVATED_HALF", "left")  # the older CANN docs' reading
    torch.testing.assert_close(npu_geglu(x)[0], tanh_gelu(a) * b)
    torch.testing.assert_close(npu_geglu(x, activate_left=True)[0], a * tanh_gelu(b))


def test_geglu_gradients_match_reference():
    x = torch.randn(4, 12, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    grad = torch.randn(4, 6)
    npu_geglu(x)[0].backward(grad)
    a, b = x_ref.chunk(2, -1)
    (a * tanh_gelu(b)).backward(grad)
    torch.testing.assert_close(x.grad, x_ref.grad)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(dtype, approximate):
    x = torch.randn(5, 7).to(dtype)
    assert_close(npu_gelu(x, approximate=approximate), F.gelu(x.float(), approximate=approximate).to(dtype), "npu_gelu")


def test_gelu_keyword_only_and_modes():
    x = torch.randn(3)
    with pytest.raises(TypeError):
        npu_gelu(x, "tanh")
    with pytest.raises(NpuOpError, match="approximate"):
        npu_gelu(x, approximate="erf")


@pytest.mark.parametrize("dtype", DTYPES)
def test_fast_gelu_is_sigmoid_approximation(dtype):
    x = torch.linspace(-4, 4, 101).to(dtype)
    expected = (x.float() / (1 + torch.exp(-1.702 * x.float()))).to(dtype)
    assert_close(npu_fast_gelu(x), expected, "npu_fast_gelu")
    assert_close(fast_gelu(x), expected, "npu_fast_gelu")
    # the trap: it is not GELU
    assert (npu_fast_gelu(x.float()) - F.gelu(x.float())).abs().max() > 1e-2


def test_activation_gradients_flow():
    x = torch.randn(8, requires_grad=True)
    (npu_gelu(x).sum() + npu_fast_gelu(x).sum()).backward()
    ref = x.detach().clone().requires_grad_()
    (F.gelu(ref).sum() + (ref * torch.sigmoid(1.702 * ref)).sum()).backward()
    torch.testing.assert_close(x.grad, ref.grad)
