import pytest
import torch

from npu_migrate.kernels._checks import NpuOpError
from npu_migrate.kernels.scaled_masked_softmax import npu_scaled_masked_softmax
from tests.tolerances import DTYPES, assert_close

SHAPE = (2, 2, 32, 64)


def eager_attention_probs(scores, keep, scale):
    """HF eager attention: additive float mask built from a keep-mask, softmax in float32."""
    additive = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
    return torch.softmax(scores.float() * scale + additive, dim=-1)


def causal_masked(s_q, s_k):
    return torch.ones(s_q, s_k, dtype=torch.bool).triu(1)  # True = masked out


@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_eager_attention(dtype):
    x = torch.randn(SHAPE).to(dtype)
    mask = causal_masked(*SHAPE[-2:])[None, None]
    out = npu_scaled_masked_softmax(x, mask, scale=0.125)
    assert out.dtype == dtype and out.shape == SHAPE
    assert_close(out, eager_attention_probs(x, ~mask, 0.125).to(dtype), "npu_scaled_masked_softmax")


def test_mask_broadcasts_per_batch():
    x = torch.randn(SHAPE)
    mask = torch.rand(SHAPE[0], 1, *SHAPE[-2:]) > 0.7
    mask[..., 0] = False  # no fully masked rows
    torch.testing.assert_close(npu_scaled_masked_softmax(x, mask), eager_attention_probs(x, ~mask, 1.0))


def test_true_means_masked_out():
    """Passing an SDPA-style keep-mask (True = attend) gives different numbers: the trap."""
    x = torch.randn(SHAPE)
    masked = causal_masked(*SHAPE[-2:])
    masked[:, -1] = True  # keep every row of ~masked partly visible too
    masked[-1, -1] = False
    right = npu_scaled_masked_softmax(x, masked)
    wrong = npu_scaled_masked_softmax(x, ~masked)
    assert (right - wrong).abs().max() > 0.1
    assert right[..., masked].abs().max() == 0


def test_fully_masked_row_is_uniform():
    x = torch.randn(1, 1, 32, 32)
    mask = torch.zeros(1, 1, 32, 32, dtype=torch.bool)
    mask[..., 3, :] = True
    out = npu_scaled_masked_softmax(x, mask)
    torch.testing.assert_close(out[0, 0, 3], torch.full((32,), 1 / 32))


def test_gradients_match_reference():
    x = torch.randn(1, 2, 32, 32, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    mask = causal_masked(32, 32)
    grad = torch.randn(1, 2, 32, 32)
    npu_scaled_masked_softmax(x, mask, scale=0.5).backward(grad)
    eager_attention_probs(x_ref, ~mask, 0.5).backward(grad)
    torch.testing.assert_close(x.grad, x_ref.grad)


@pytest.mark.parametrize("shape, mask, kwargs, message", [
    ((1, 1, 32, 48), None, {}, "multiples of 32"),
    ((1, 1, 16, 32), None, {}, r"\[32, 4096\]"),
    ((1, 1, 32, 4128), None, {}, r"\[32, 4096\]"),
    ((1, 32, 32), None, {}, "4-D"),
    (SHAPE, torch.zeros(SHAPE, dtype=torch.uint8), {}, "bool"),
    (SHAPE, torch.zeros(3, 1, 32, 64, dtype=torch.bool), {}, "broadcast"),
    (SHAPE, None, dict(fixed_triu_mask=True), "only False"),
])
def test_constraints(shape, mask, kwargs, message):
    x = torch.randn(shape)
    mask = torch.zeros(shape, dtype=torch.bool) if mask is None else mask
    with pytest.raises(NpuOpError, match=message):
        npu_scaled_masked_softmax(x, mask, **kwargs)


def test_float64_refused():
    with pytest.raises(NpuOpError, match="float64"):
        npu_scaled_masked_softmax(torch.randn(SHAPE, dtype=torch.float64), torch.zeros(SHAPE, dtype=torch.bool))
