import pytest
import torch
import torch.nn as nn

from npu_migrate.kernels._checks import NpuOpError
from npu_migrate.kernels.layer_norm import npu_add_layer_norm, npu_layer_norm_eval
from tests.tolerances import DTYPES, assert_close

H = 32


def hf_layer_norm(x, weight, bias, eps):
    """nn.LayerNorm in the input dtype, as eager model code runs it."""
    ln = nn.LayerNorm(H, eps=eps).to(x.dtype)
    with torch.no_grad():
        ln.weight.copy_(weight)
        ln.bias.copy_(bias)
    return ln(x)


def params(dtype):
    return (1 + 0.1 * torch.randn(H)).to(dtype), (0.1 * torch.randn(H)).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_eval_matches_nn_layer_norm(dtype):
    x = torch.randn(2, 5, H).to(dtype)
    w, b = params(dtype)
    with torch.no_grad():
        assert_close(npu_layer_norm_eval(x, [H], w, b, eps=1e-5), hf_layer_norm(x, w, b, 1e-5), "npu_layer_norm_eval")
        ref = torch.nn.functional.layer_norm(x.float(), (H,)).to(dtype)
        assert_close(npu_layer_norm_eval(x, [H]), ref, "npu_layer_norm_eval")


def test_layer_norm_eval_constraints():
    x = torch.randn(2, H)
    with pytest.raises(NpuOpError, match="trailing dims"):
        npu_layer_norm_eval(x, [H + 1])
    with pytest.raises(NpuOpError, match="no backward"):
        npu_layer_norm_eval(x.requires_grad_(), [H])


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_layer_norm_outputs(dtype):
    x1, x2 = torch.randn(2, 5, H).to(dtype), torch.randn(2, 5, H).to(dtype)
    w, b = params(dtype)
    with torch.no_grad():
        y, mean, rstd, x = npu_add_layer_norm(x1, x2, w, b, 1e-5, additional_output=True)
        residual = x1 + x2
        assert_close(y, hf_layer_norm(residual, w, b, 1e-5), "npu_add_layer_norm")
    assert_close(x, residual, "npu_add_layer_norm")
    for stat in (mean, rstd):
        assert stat.dtype == torch.float32 and stat.shape == (2, 5, 1)
    s = x1.float() + x2.float()
    torch.testing.assert_close(mean, s.mean(-1, keepdim=True))
    torch.testing.assert_close(rstd, torch.rsqrt(s.var(-1, unbiased=False, keepdim=True) + 1e-5))


def test_add_layer_norm_sum_only_with_additional_output():
    x1, x2 = torch.randn(3, H), torch.randn(3, H)
    w, b = params(torch.float32)
    x = npu_add_layer_norm(x1, x2, w, b)[3]
    assert x.shape == x1.shape and torch.isnan(x).all(), "unwritten 4th output must not look valid"


def test_add_layer_norm_fp32_weights_with_bf16_x():
    x1, x2 = torch.randn(3, H).bfloat16(), torch.randn(3, H).bfloat16()
    w, b = params(torch.float32)
    y = npu_add_layer_norm(x1, x2, w, b)[0]
    ref = torch.nn.functional.layer_norm((x1.float() + x2.float()), (H,), w, b, 1e-5).bfloat16()
    assert_close(y, ref, "npu_add_layer_norm")


def test_add_layer_norm_gradients_match_reference():
    x1, x2 = torch.randn(4, H, requires_grad=True), torch.randn(4, H, requires_grad=True)
    w, b = (t.requires_grad_() for t in params(torch.float32))
    leaves = [x1, x2, w, b]
    ref = [t.detach().clone().requires_grad_() for t in leaves]
    grad = torch.randn(4, H)
    npu_add_layer_norm(x1, x2, w, b)[0].backward(grad)
    torch.nn.functional.layer_norm(ref[0] + ref[1], (H,), ref[2], ref[3], 1e-5).backward(grad)
    for got, want in zip(leaves, ref):
        torch.testing.assert_close(got.grad, want.grad)


@pytest.mark.parametrize("x1, x2, message", [
    (torch.randn(2, H, dtype=torch.float64), torch.randn(2, H, dtype=torch.float64), "float64"),
    (torch.randn(2, H), torch.randn(3, H), "same shape"),
    (torch.randn(2, H), torch.randn(2, H).half(), "share one dtype"),
])
def test_add_layer_norm_constraints(x1, x2, message):
    w, b = params(torch.float32)
    with pytest.raises(NpuOpError, match=message):
        npu_add_layer_norm(x1, x2, w, b)
