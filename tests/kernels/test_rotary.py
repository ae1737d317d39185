import pytest
import torch

from npu_migrate.kernels._checks import NpuOpError
from npu_migrate.kernels.rotary import npu_apply_rotary_pos_emb, npu_rotary_mul
from tests.kernels import golden
from tests.tolerances import DTYPES, assert_close

B, N, S, D = 2, 3, 5, 64


# --- independent references: the Hugging Face Llama code and the Meta/GPT-J complex form ------

def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def hf_cos_sin(batch, seq, dim, dtype):
    """LlamaRotaryEmbedding: cos/sin [B, S, D] built from cat(freqs, freqs)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
    pos = torch.arange(seq).float()[None].expand(batch, -1)
    freqs = pos[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype), freqs


def meta_rotary(x, freqs):
    """Meta Llama apply_rotary_emb: x as complex pairs times e^{i*freq} (interleaved layout, BNSD)."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * torch.polar(torch.ones_like(freqs), freqs)).flatten(-2)


def rand(*shape, dtype=torch.float32, grad=False):
    return torch.randn(*shape, dtype=dtype).requires_grad_(grad)


# --- npu_rotary_mul -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_half_matches_hf_bnsd(dtype):
    q, k = rand(B, N, S, D, dtype=dtype), rand(B, N, S, D, dtype=dtype)
    cos, sin, _ = hf_cos_sin(B, S, D, dtype)
    ref_q, ref_k = hf_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)
    assert_close(npu_rotary_mul(q, cos.unsqueeze(1), sin.unsqueeze(1)), ref_q, "npu_rotary_mul")
    assert_close(npu_rotary_mul(k, cos[:1].unsqueeze(1), sin[:1].unsqueeze(1)), ref_k, "npu_rotary_mul")  # 11SD broadcast


def test_half_bsnd_layout():
    q = rand(B, S, N, D)
    cos, sin, _ = hf_cos_sin(B, S, D, torch.float32)
    ref = hf_apply_rotary_pos_emb(q, q, cos, sin, unsqueeze_dim=2)[0]
    assert_close(npu_rotary_mul(q, cos.unsqueeze(2), sin.unsqueeze(2)), ref, "npu_rotary_mul")


@pytest.mark.parametrize("dtype", DTYPES)
def test_interleave_matches_meta_complex_form(dtype):
    x = rand(B, N, S, D, dtype=dtype)
    _, _, freqs = hf_cos_sin(1, S, D, torch.float32)  # freqs [1, S, D/2]
    cos = freqs.cos().repeat_interleave(2, dim=-1)[:, None].to(dtype)  # 11SD, pairs share an angle
    sin = freqs.sin().repeat_interleave(2, dim=-1)[:, None].to(dtype)
    out = npu_rotary_mul(x, cos, sin, rotary_mode="interleave")
    assert_close(out, meta_rotary(x, freqs[:, None]).to(dtype), "npu_rotary_mul")


def test_half_and_interleave_give_different_numbers():
    x = rand(1, 1, S, D)
    cos, sin, _ = hf_cos_sin(1, S, D, torch.float32)
    half = npu_rotary_mul(x, cos[:, None], sin[:, None], "half")
    inter = npu_rotary_mul(x, cos[:, None], sin[:, None], "interleave")
    assert (half - inter).abs().max() > 0.1


def test_rotate_matrix_equivalent_to_half():
    x = rand(1, N, S, D)
    cos, sin, _ = hf_cos_sin(1, S, D, torch.float32)
    h = D // 2
    rot = torch.zeros(D, D)
    rot[torch.arange(h) + h, torch.arange(h)] = -1.0  # out[j] = -x[j + h]
    rot[torch.arange(h), torch.arange(h) + h] = 1.0   # out[j + h] = x[j]
    assert_close(npu_rotary_mul(x, cos[:, None], sin[:, None], rotate=rot),
                 npu_rotary_mul(x, cos[:, None], sin[:, None]), "npu_rotary_mul")
    with pytest.raises(NpuOpError, match="no backward"):
        npu_rotary_mul(x.requires_grad_(), cos[:, None], sin[:, None], rotate=rot)


def test_gradients_match_reference_autograd():
    cos, sin, _ = hf_cos_sin(B, S, D, torch.float32)
    inputs = [rand(B, N, S, D, grad=True), cos.unsqueeze(1).clone().requires_grad_(),
              sin.unsqueeze(1).clone().requires_grad_()]
    ref_inputs = [t.detach().clone().requires_grad_() for t in inputs]
    grad_out = torch.randn(B, N, S, D)
    npu_rotary_mul(*inputs).backward(grad_out)
    x, c, s = ref_inputs
    (x * c + rotate_half(x) * s).backward(grad_out)
    for got, want in zip(inputs, ref_inputs):
        torch.testing.assert_close(got.grad, want.grad)


@pytest.mark.parametrize("make, message", [
    (lambda: (rand(B, N, S, D, dtype=torch.float64), rand(1, 1, S, D, dtype=torch.float64)), "float64"),
    (lambda: (rand(B, N, S, 63), rand(1, 1, S, 63)), "even"),
    (lambda: (rand(1, 1, 2, 896), rand(1, 1, 2, 896)), "< 896"),
    (lambda: (rand(N, S, D), rand(1, S, D)), "4-D"),
    (lambda: (rand(B, N, S, D), rand(B, S, D).unsqueeze(0)), "does not broadcast"),
    (lambda: (rand(B, N, S, D), rand(B, N, S, D).half()), "share one dtype"),
])
def test_constraint_errors(make, message):
    x, r = make()
    with pytest.raises(NpuOpError, match=message):
        npu_rotary_mul(x, r, r)


def uniform(shape, dtype, seed):
    """torch.rand inputs as the upstream tests draw them (cos/sin in [0, 1) too)."""
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("mode, x_shape, r_shape", [("half", *c) for c in golden.UPSTREAM_ROTARY_HALF]
                         + [("interleave", *c) for c in golden.UPSTREAM_ROTARY_INTERLEAVE])
def test_rotary_mul_matches_golden_on_upstream_shapes(mode, x_shape, r_shape, dtype):
    """torch_npu's test_rotary_mul / test_rotary_mul_mode shapes: BSND with 1S1D, SBND with S11D and
    SB1D in half mode; 1S1D and 11SD in interleave mode."""
    x, r1, r2 = uniform(x_shape, dtype, 0), uniform(r_shape, dtype, 1), uniform(r_shape, dtype, 2)
    out = npu_rotary_mul(x, r1, r2, mode)
    assert out.shape == x.shape and out.dtype == dtype
    assert_close(out, golden.rotary_mul(x.float(), r1.float(), r2.float(), mode).to(dtype), "npu_rotary_mul")


def test_rotary_mul_is_four_dimensional_only():
    """Every torch_npu page for npu_rotary_mul asks for 4-D input, r1 and r2; 3-D (TND) rotary is
    npu_apply_rotary_pos_emb's (tested below)."""
    x, r = rand(S, N, D), rand(S, 1, D)
    with pytest.raises(NpuOpError, match="must be 4-D"):
        npu_rotary_mul(x, r, r)


def test_interleave_refuses_per_batch_cos():
    x, r = rand(B, N, S, D), rand(B, 1, S, D)  # B1SD is a 'half'-only layout
    npu_rotary_mul(x, r, r, "half")
    with pytest.raises(NpuOpError, match="interleave"):
        npu_rotary_mul(x, r, r, "interleave")
    with pytest.raises(NpuOpError, match="rotary_mode"):
        npu_rotary_mul(x, r, r, "quarter")


# --- npu_apply_rotary_pos_emb ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [64, 128])
def test_apply_rotary_pos_emb_in_place_bsnd(dtype, d):
    q, k = rand(B, S, N, d, dtype=dtype), rand(B, S, 1, d, dtype=dtype)
    cos, sin, _ = hf_cos_sin(B, S, d, dtype)
    ref_q, ref_k = hf_apply_rotary_pos_emb(q.clone(), k.clone(), cos, sin, unsqueeze_dim=2)
    q_ptr, k_ptr = q.data_ptr(), k.data_ptr()
    out_q, out_k = npu_apply_rotary_pos_emb(q, k, cos.unsqueeze(2), sin.unsqueeze(2))
    assert out_q is q and out_k is k and q.data_ptr() == q_ptr and k.data_ptr() == k_ptr
    assert_close(q, ref_q, "npu_apply_rotary_pos_emb")
    assert_close(k, ref_k, "npu_apply_rotary_pos_emb")


def test_apply_rotary_pos_emb_tnd():
    t = 7
    q, k = rand(t, N, 128), rand(t, 2, 128)
    cos, sin, _ = hf_cos_sin(1, t, 128, torch.float32)
    ref_q, ref_k = hf_apply_rotary_pos_emb(q.clone(), k.clone(), cos[0], sin[0], unsqueeze_dim=1)
    npu_apply_rotary_pos_emb(q, k, cos[0].unsqueeze(1), sin[0].unsqueeze(1), layout="TND")
    assert_close(q, ref_q, "npu_apply_rotary_pos_emb")
    assert_close(k, ref_k, "npu_apply_rotary_pos_emb")


@pytest.mark.parametrize("kwargs, cos_shape, message", [
    (dict(), (B, S, 1, 96), "64 or 128"),
    (dict(layout="BNSD"), (B, S, 1, 64), "layout"),
    (dict(rotary_mode="interleave"), (B, S, 1, 64), "'half'"),
    (dict(), (1, S, 1, 64), "shape"),
    (dict(), (B, S, N, 64), "shape"),
])
def test_apply_rotary_pos_emb_constraints(kwargs, cos_shape, message):
    d = cos_shape[-1]
    q, k, c = rand(B, S, N, d), rand(B, S, N, d), rand(*cos_shape)
    with pytest.raises(NpuOpError, match=message):
        npu_apply_rotary_pos_emb(q, k, c, c, **kwargs)


def test_apply_rotary_pos_emb_dtype_and_autograd():
    q, k, c = rand(B, S, N, 64, dtype=torch.bfloat16), rand(B, S, N, 64, dtype=torch.bfloat16), rand(B, S, 1, 64)
    with pytest.raises(NpuOpError, match="share one dtype"):
        npu_apply_rotary_pos_emb(q, k, c, c)  # float32 cos/sin with bf16 q/k
    with pytest.raises(NpuOpError, match="no backward"):
        npu_apply_rotary_pos_emb(q.float().requires_grad_(), k.float(), c, c)


@pytest.mark.slow
def test_apply_rotary_pos_emb_matches_golden_on_the_upstream_case():
    """torch_npu's test: BSND q and k [4, 1024, 16, 128], cos/sin [4, 1024, 1, 128], float16 uniform(0, 1)."""
    q, k = uniform((4, 1024, 16, 128), torch.float16, 3), uniform((4, 1024, 16, 128), torch.float16, 4)
    cos, sin = uniform((4, 1024, 1, 128), torch.float16, 5), uniform((4, 1024, 1, 128), torch.float16, 6)
    want = [golden.rotary_mul(t.float(), cos.float(), sin.float()).half() for t in (q, k)]
    npu_apply_rotary_pos_emb(q, k, cos, sin)
    assert_close(q, want[0], "npu_apply_rotary_pos_emb")
    assert_close(k, want[1], "npu_apply_rotary_pos_emb")
