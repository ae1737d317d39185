"""NPU310/NPU311: rewritten rotary code computes what the original computed, on the emulated NPU.

Each snippet is migrated with the rotary rule only, then the original and the migrated function
run on the same inputs: in float32 and bfloat16, the results agree within the op table's
tolerance and the fused kernel really ran; with inputs the kernel does not take, the guard runs the
original code (bit for bit, no kernel call). Tiny shapes: B=2, S=5, N=3, D=8.
"""

import math
import sys
from functools import lru_cache
from pathlib import Path

import pytest
import torch

from npu_migrate import kernels
from npu_migrate.migrate.engine import Engine
from npu_migrate.migrate.rules.rotary import Rotary
from npu_migrate.opmap import load_table as _load_table

load_table = lru_cache(maxsize=1)(_load_table)
HELPERS = Path(__file__).parents[2] / "migrate" / "helpers"
B, S, N, D = 2, 5, 3, 8

HALF = '''
import torch


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def f(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed
'''

CHUNK_BSND = '''
import torch


def _rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def f(x, cos, sin):
    cos = cos[None, :, None, :]
    sin = sin[None, :, None, :]
    return x * cos + _rotate_half(x) * sin
'''

PARTIAL = '''
import torch


def rotate_half(x):
    x1, x2 = torch.chunk(x, 2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def f(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
    q_embed = torch.cat([(q_rot * cos) + (rotate_half(q_rot) * sin), q_pass], dim=-1)
    k_embed = torch.cat([(k_rot * cos) + (rotate_half(k_rot) * sin), k_pass], dim=-1)
    return q_embed, k_embed
'''

UPCAST = '''
import torch


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def f(q, k, cos, sin, unsqueeze_dim=1):
    orig_q_dtype, orig_k_dtype = q.dtype, k.dtype
    q, k = q.float(), k.float()
    cos, sin = cos.unsqueeze(unsqueeze_dim).float(), sin.unsqueeze(unsqueeze_dim).float()
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed.to(orig_q_dtype), k_embed.to(orig_k_dtype)
'''

INTERLEAVE_GPTJ = '''
import torch


def rotate_every_two(x):
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


def f(tensor, sin, cos):
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    return (tensor * cos) + (rotate_every_two(tensor) * sin)
'''

INLINE_INTERLEAVE = '''
import torch


def f(x, cos, sin):
    return x * cos + torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2) * sin
'''


def angles(rows, dim):
    """Rotary angles for ``rows`` positions and ``dim // 2`` frequencies, float32."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    return torch.outer(torch.arange(rows, dtype=torch.float32), inv_freq)


def half_tables(*lead):
    """HF cos/sin: both halves hold the same angles; shape ``lead + (D,)``."""
    a = angles(math.prod(lead), D)
    a = torch.cat((a, a), dim=-1).reshape(*lead, D)
    return a.cos(), a.sin()


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def llama_inputs():
    cos, sin = half_tables(B, S)
    return randn(B, N, S, D), randn(B, 1, S, D, seed=1), cos, sin  # GQA: one key head


def bsnd_inputs():
    cos, sin = half_tables(S)
    return randn(B, S, N, D), cos, sin


def partial_inputs():
    a = angles(B * S, D // 2).reshape(B, S, D // 4)
    a = torch.cat((a, a), dim=-1)  # rotary_dim = D // 2
    return randn(B, N, S, D), randn(B, N, S, D, seed=1), a.cos(), a.sin()


def gptj_inputs():
    a = angles(S, D).expand(B, S, D // 2)  # per-batch tables, as GPT-J gathers them by position_ids
    return randn(B, S, N, D), a.sin(), a.cos()


def interleaved_inputs():
    a = angles(S, D).repeat_interleave(2, dim=-1)[None, :, None, :]  # 1S1D
    return randn(B, S, N, D), a.cos(), a.sin()


CASES = {
    "half-bnsd-gqa": (HALF, "half", llama_inputs),
    "half-chunk-bsnd": (CHUNK_BSND, "half", bsnd_inputs),
    "partial": (PARTIAL, "half", partial_inputs),
    "upcast": (UPCAST, "half", llama_inputs),
    "interleave-gptj": (INTERLEAVE_GPTJ, "interleave", gptj_inputs),
    "interleave-inline": (INLINE_INTERLEAVE, "interleave", interleaved_inputs),
}


def migrate(source):
    result = Engine(load_table(), [Rotary]).migrate("snippet.py", source.encode())
    assert result.status == "changed", result.findings
    assert {f.code for f in result.findings} == {"NPU310"}
    assert all(f.target == "torch_npu.npu_rotary_mul" for f in result.findings)
    return result.migrated


def run(source, args):
    namespace = {}
    exec(compile(source, "snippet.py", "exec"), namespace)
    return namespace["f"](*args)


@pytest.fixture
def npu(monkeypatch):
    """The emulated NPU with the vendored helper importable; counts npu_rotary_mul calls."""
    calls = []
    with kernels.emulate():
        torch_npu = sys.modules["torch_npu"]
        real = torch_npu.npu_rotary_mul

        def counted(*args, **kwargs):
            calls.append(args[3] if len(args) > 3 else kwargs.get("rotary_mode", "half"))
            return real(*args, **kwargs)

        monkeypatch.setattr(torch_npu, "npu_rotary_mul", counted)
        monkeypatch.syspath_prepend(str(HELPERS))
        monkeypatch.delitem(sys.modules, "npu_glue", raising=False)
        yield calls
    sys.modules.pop("npu_glue", None)


def as_tuple(value):
    return value if isinstance(value, tuple) else (value,)


def tolerance(mode, dtype):
    return load_table().exact(f"pattern.rotary.{mode}").tolerance[str(dtype).removeprefix("torch.")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", list(CASES))
def test_rewrite_matches_the_original(case, dtype, npu):
    source, mode, make_inputs = CASES[case]
    args = [t.to(dtype) for t in make_inputs()]
    expected = as_tuple(run(source, args))
    got = as_tuple(run(migrate(source), args))
    assert npu and set(npu) == {mode}, "the fused kernel did not run"
    tol = tolerance(mode, dtype)
    for want, have in zip(expected, got):
        assert have.dtype == want.dtype and have.shape == want.shape
        torch.testing.assert_close(have, want, rtol=tol.rtol, atol=tol.atol)


def test_upcast_keeps_computing_in_float32(npu):
    """The kernel sees the float32 tensors the original computed with: bfloat16 results are the
    float32 result rounded once, as in the original."""
    args = [t.to(torch.bfloat16) for t in llama_inputs()]
    expected = run(UPCAST, args)
    got = run(migrate(UPCAST), args)
    assert npu
    for want, have in zip(expected, got):
        assert have.dtype == torch.bfloat16
        torch.testing.assert_close(have, want, rtol=0, atol=0)


def test_gradients_match(npu):
    q, k, cos, sin = llama_inputs()
    results = []
    for source in (HALF, migrate(HALF)):
        leaves = [t.clone().requires_grad_() for t in (q, k, cos, sin)]
        q_embed, k_embed = run(source, leaves)
        (q_embed.square().sum() + k_embed.sum()).backward()
        results.append([t.grad for t in leaves])
    assert npu
    for want, have in zip(*results):
        torch.testing.assert_close(have, want)


@pytest.mark.parametrize("case, args", [
    ("half-chunk-bsnd", lambda: (randn(S, D), *half_tables(S))),  # 3-D x: the kernel takes 4-D only
    ("half-bnsd-gqa", lambda: (randn(B, N, S, 6 + 1), randn(B, 1, S, 7), torch.ones(B, S, 7), torch.zeros(B, S, 7))),  # odd D
    ("half-bnsd-gqa", lambda: (*llama_inputs()[:2], *(t * 1.5 for t in llama_inputs()[2:]))),  # scaled tables
    ("half-bnsd-gqa", lambda: (*(t.double() for t in llama_inputs()[:2]), *llama_inputs()[2:])),  # mixed dtypes
])
def test_guard_runs_the_original_when_the_kernel_does_not_fit(case, args, npu):
    source = CASES[case][0]
    inputs = args()
    expected = as_tuple(run(source, inputs))
    got = as_tuple(run(migrate(source), inputs))
    assert not npu, "the kernel ran on inputs it does not take"
    for want, have in zip(expected, got):
        assert have.dtype == want.dtype
        assert torch.equal(have, want)


def test_interleave_equals_the_complex_form():
    """The plan NPU311 gives for freqs_cis code: real tables repeat-interleaved, 'interleave' mode."""
    with kernels.emulate():
        import torch_npu

        x = randn(B, S, N, D)
        freqs_cis = torch.polar(torch.ones(S, D // 2), angles(S, D))[None, :, None, :]
        x_ = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        expected = torch.view_as_real(x_ * freqs_cis).flatten(3)
        cos = freqs_cis.real.repeat_interleave(2, -1)
        sin = freqs_cis.imag.repeat_interleave(2, -1)
        got = torch_npu.npu_rotary_mul(x, cos, sin, "interleave")
    torch.testing.assert_close(got, expected)


def test_complex_form_is_reported_with_a_plan():
    source = (Path(__file__).parents[2] / "fixtures" / "models" / "gptj" / "modeling_gptj.py").read_bytes()
    result = Engine(load_table(), [Rotary]).migrate("modeling_gptj.py", source)
    reported = [f for f in result.findings if f.code == "NPU311"]
    assert [f.api for f in reported] == ["pattern.rotary.complex"]
    assert reported[0].fallback.plan == "composite" and "repeat_interleave(2, -1)" in reported[0].fallback.detail
    rewritten = [f for f in result.findings if f.code == "NPU310"]
    assert [f.api for f in rewritten] == ["pattern.rotary.interleave"]
