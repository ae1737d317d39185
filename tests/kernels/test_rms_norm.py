import pytest
import torch

from npu_migrate.kernels._checks import NpuOpError
from npu_migrate.kernels.rms_norm import npu_add_rms_norm, npu_gemma_rms_norm, npu_rms_norm
from tests.kernels import golden
from tests.tolerances import DTYPES, assert_close


# --- independent references: the Hugging Face modules these ops replace ---------------------

def llama_rms_norm(hidden_states, weight, eps=1e-6):
    """LlamaRMSNorm.forward."""
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states.to(input_dtype)


def gemma_rms_norm(x, weight, eps=1e-6):
    """GemmaRMSNorm.forward: the weight is stored as an offset from 1."""
    output = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    output = output * (1.0 + weight.float())
    return output.type_as(x)


def inputs(dtype, shape=(2, 5, 32)):
    return torch.randn(*shape).to(dtype), (1 + 0.1 * torch.randn(shape[-1])).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_matches_llama(dtype):
    x, w = inputs(dtype)
    y, rstd = npu_rms_norm(x, w)
    assert_close(y, llama_rms_norm(x, w), "npu_rms_norm")
    assert rstd.dtype == torch.float32 and rstd.shape == (2, 5, 1)
    torch.testing.assert_close(rstd, torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6))


def test_rstd_shape_for_multi_dim_gamma():
    x, gamma = torch.randn(2, 3, 4, 8), torch.ones(4, 8)
    y, rstd = npu_rms_norm(x, gamma, epsilon=1e-5)
    assert rstd.shape == (2, 3, 1, 1) and rstd.dtype == torch.float32
    ref = x * torch.rsqrt(x.pow(2).mean(dim=(-2, -1), keepdim=True) + 1e-5)
    torch.testing.assert_close(y, ref)


def test_epsilon_matters():
    """HF configs often use rms_norm_eps=1e-5 while the kernel default is 1e-6: a dropped kwarg shows."""
    x, w = 1e-3 * torch.randn(4, 16), torch.ones(16)
    assert not torch.allclose(npu_rms_norm(x, w)[0], npu_rms_norm(x, w, epsilon=1e-5)[0], rtol=1e-3)
    torch.testing.assert_close(npu_rms_norm(x, w, epsilon=1e-5)[0], llama_rms_norm(x, w, eps=1e-5))


@pytest.mark.slow
@pytest.mark.parametrize("shape, x_dtype, gamma_dtype", golden.UPSTREAM_RMS_NORM)
def test_rms_norm_matches_golden_on_upstream_cases(shape, x_dtype, gamma_dtype):
    """torch_npu's test_rms_norm / test_rms_norm_mix_dtype: uniform(0, 100) inputs, a float16 x
    with a float32 gamma included; y comes back in x's dtype, rstd in float32."""
    gen = torch.Generator().manual_seed(0)
    x = (100 * torch.rand(shape, generator=gen)).to(x_dtype)
    gamma = (100 * torch.rand(shape[-1], generator=gen)).to(gamma_dtype)
    y, rstd = npu_rms_norm(x, gamma)
    ref_y, ref_rstd = golden.rms_norm(x, gamma)
    assert y.dtype == x_dtype and rstd.dtype == torch.float32
    assert_close(y, ref_y, "npu_rms_norm")
    torch.testing.assert_close(rstd, ref_rstd)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_float32_gamma_with_half_x_as_under_amp(dtype):
    """The AMP case: float32 weight, float16/bfloat16 activations; gradients keep each input's dtype."""
    x = torch.randn(3, 5, 32).to(dtype).requires_grad_()
    w = (1 + 0.1 * torch.randn(32)).requires_grad_()
    y, rstd = npu_rms_norm(x, w)
    assert y.dtype == dtype
    assert_close(y, golden.rms_norm(x.detach(), w.detach())[0], "npu_rms_norm")
    y.float().sum().backward()
    assert x.grad.dtype == dtype and w.grad.dtype == torch.float32


def test_gamma_dtype_rules():
    x, w = inputs(torch.bfloat16)
    with pytest.raises(NpuOpError, match="gamma dtype float16 must equal x dtype bfloat16"):
        npu_rms_norm(x, w.half())
    with pytest.raises(NpuOpError, match="gamma dtype bfloat16 must equal x dtype float32"):
        npu_rms_norm(x.float(), w)  # a half gamma with float32 x is not the mixed case
    for op in (npu_gemma_rms_norm, lambda x, w: npu_add_rms_norm(x, x, w)):
        with pytest.raises(NpuOpError, match="gamma dtype float32 must equal x dtype bfloat16 \\(cast"):
            op(x, w.float())  # only npu_rms_norm documents the mixed case


@pytest.mark.parametrize("x, gamma, message", [
    (torch.randn(2, 8, dtype=torch.float64), torch.ones(8, dtype=torch.float64), "float64"),
    (torch.randn(8), torch.ones(8), "2 to 8 dims"),
    (torch.randn(2, 8), torch.ones(4), "trailing dims"),
])
def test_rms_norm_constraints(x, gamma, message):
    with pytest.raises(NpuOpError, match=message):
        npu_rms_norm(x, gamma)


def test_rms_norm_gradients_match_reference():
    x, w = torch.randn(3, 4, 16, requires_grad=True), (1 + torch.randn(16)).requires_grad_()
    x_ref, w_ref = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    grad = torch.randn(3, 4, 16)
    npu_rms_norm(x, w)[0].backward(grad)
    llama_rms_norm(x_ref, w_ref).backward(grad)
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(w.grad, w_ref.grad)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm_returns_y_rstd_sum(dtype):
    x1, w = inputs(dtype)
    x2 = torch.randn(x1.shape).to(dtype)
    y, rstd, x = npu_add_rms_norm(x1, x2, w)
    residual = x1 + x2  # HF: residual = residual + hidden_states; hidden = norm(residual)
    assert_close(x, residual, "npu_add_rms_norm")
    assert_close(y, llama_rms_norm(residual, w), "npu_add_rms_norm")
    assert rstd.dtype == torch.float32 and rstd.shape == x1.shape[:-1] + (1,)


def test_add_rms_norm_has_no_backward():
    x1, w = inputs(torch.float32)
    with pytest.raises(NpuOpError, match="no backward"):
        npu_add_rms_norm(x1.requires_grad_(), x1, w)
    with torch.no_grad():
        npu_add_rms_norm(x1, x1, w)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemma_rms_norm(dtype):
    x, _ = inputs(dtype)
    w = (0.1 * torch.randn(x.shape[-1])).to(dtype)
    y, rstd = npu_gemma_rms_norm(x, w)
    assert_close(y, gemma_rms_norm(x, w), "npu_gemma_rms_norm")
    assert rstd.dtype == torch.float32
    # the trap: plain rms_norm with Gemma's offset weight is a different function
    assert not torch.allclose(npu_rms_norm(x, w)[0].float(), y.float(), atol=0.1)


def test_gemma_rms_norm_has_no_backward():
    x, w = inputs(torch.float32)
    with pytest.raises(NpuOpError, match="no backward"):
        npu_gemma_rms_norm(x, w.requires_grad_())
