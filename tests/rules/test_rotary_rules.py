"""NPU310/NPU311: rewritten rotary code computes what the original computed, on the emulated NPU.

Each snippet is migrated with the rotary rule only, then the original and the migrated function
run on the same inputs: in float32 and bfloat16, the results agree within the op table's
tolerance and the fused kernel really ran; with inputs the kernel does not take, the guard runs the
original code (bit for bit, no kernel call). Tiny shapes: B=2, S=5, N=3, D=8. The forms: per-channel
tables with every spelling of the rotation (module, nested, one-line, method and static-method
helpers, inline statements as in litgpt, pairs by reshape/unbind), pair tables (torchtune's packed
cache, halves, the tiled vision cache) and complex freqs_cis (Meta and Mistral layouts).
"""

import math
import sys
from pathlib import Path

import pytest
import torch

from npu_migrate import kernels
from npu_migrate.migrate.rules.rotary.rotary import Rotary
from tests import snippets
from tests.full_helper import HELPERS
from tests.tolerances import recorded

B, S, N, D = 2, 5, 3, 8

TABLES = (Path(__file__).parents[2] / "fixtures" / "rules" / "NPU310_rotary_tables" / "input.py").read_text() \
    .replace("def rope(", "def f(")

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


LITGPT = '''
import torch


def f(x, cos, sin):
    if cos.dim() != 3:
        raise ValueError(f"cos must be three-dimensional, but shape is {cos.shape}")
    head_size_half = x.size(-1) // 2
    x1 = x[..., :head_size_half]
    x2 = x[..., head_size_half:]
    rotated = torch.cat((-x2, x1), dim=-1)
    dims_diff = x.dim() - cos.dim()
    if dims_diff > 0:
        new_shape = cos.shape[0:1] + (1,) * dims_diff + cos.shape[1:]
        cos = cos.view(*new_shape)
        sin = sin.view(*new_shape)
    roped = (x * cos) + (rotated * sin)
    return roped.to(dtype=x.dtype)
'''

NESTED_ONE_LINE = '''
import torch


def f(q, k, cos, sin):
    def rotate_half(x):
        return torch.cat((-x[..., x.shape[-1] // 2 :], x[..., : x.shape[-1] // 2]), dim=-1)

    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, cos * k + sin * rotate_half(k)
'''

METHODS = '''
import torch
from torch import nn


class Rotary(nn.Module):
    def rotate_half(self, x):
        x1, x2 = x.split(x.shape[-1] // 2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    @staticmethod
    def _rotate(x):
        first, second = torch.chunk(x, 2, dim=-1)
        return torch.cat([-second, first], -1)

    def forward(self, q, k, cos, sin):
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return (q * cos) + (self.rotate_half(q) * sin), k * cos + self._rotate(k) * sin


def f(q, k, cos, sin):
    return Rotary()(q, k, cos, sin)
'''

INTERLEAVE_PAIRS = '''
import torch


def rotate_pairs(x):
    x = x.reshape(*x.shape[:-1], -1, 2)
    x1, x2 = x.unbind(dim=-1)
    x = torch.stack((-x2, x1), dim=-1)
    return x.reshape(*x.shape[:-2], -1)


def f(x, cos, sin):
    return x * cos + rotate_pairs(x) * sin
'''
FLIPPED = '''
import torch


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((x2, -x1), dim=-1)  # NanoChat: the other sign


def f(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)
'''

ROFORMER = '''
import torch


def f(x, cos, sin):
    rotated = torch.stack([-x[..., 1::2], x[..., ::2]], dim=-1).reshape_as(x)
    return x * cos + rotated * sin
'''

EINOPS = '''
import torch
from einops import rearrange
from torch import stack


def rotate_half(x):  # x-transformers' spelling of the interleaved rotation
    x = rearrange(x, "... (d r) -> ... d r", r=2)
    x1, x2 = x.unbind(dim=-1)
    x = stack((-x2, x1), dim=-1)
    return rearrange(x, "... d r -> ... (d r)")


def f(t, cos, sin):
    return (t * cos) + (rotate_half(t) * sin)
'''

CAST = '''
import torch


def rotate_half(x):
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def f(x, cos, sin):
    original_dtype = x.dtype
    x_embed = (x.float() * cos) + (rotate_half(x).float() * sin)  # ERNIE/GLM: full precision
    return x_embed.to(original_dtype)
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


def tables_2d_inputs():
    cos, sin = half_tables(S)  # [S, D] tables for a [B, N, S, D] x: 11SD as they broadcast
    return randn(B, N, S, D), cos, sin


def tables_3d_inputs():
    cos, sin = half_tables(S, 1)  # [S, 1, D] tables for a [B, S, N, D] x: 1S1D as they broadcast
    return randn(B, S, N, D), cos, sin


def litgpt_inputs():
    cos, sin = half_tables(B, S)  # (B, T, head_size): apply_rope views them to (B, 1, T, head_size)
    return randn(B, N, S, D), cos, sin


CASES = {
    "half-bnsd-gqa": (HALF, "half", llama_inputs),
    "half-chunk-bsnd": (CHUNK_BSND, "half", bsnd_inputs),
    "partial": (PARTIAL, "half", partial_inputs),
    "upcast": (UPCAST, "half", llama_inputs),
    "interleave-gptj": (INTERLEAVE_GPTJ, "interleave", gptj_inputs),
    "interleave-inline": (INLINE_INTERLEAVE, "interleave", interleaved_inputs),
    "litgpt-inline-statements": (LITGPT, "half", litgpt_inputs),
    "nested-one-line": (NESTED_ONE_LINE, "half", llama_inputs),
    "method-and-staticmethod": (METHODS, "half", llama_inputs),
    "interleave-reshape-unbind": (INTERLEAVE_PAIRS, "interleave", interleaved_inputs),
    "negated-rotation": (FLIPPED, "half", llama_inputs),
    "roformer-reshape-as": (ROFORMER, "interleave", interleaved_inputs),
    "einops-rearrange-pairs": (EINOPS, "interleave", interleaved_inputs),
    # fewer-dim tables: rotary_fits once refused them (never fused although counted as rewritten)
    "tables-2d": (TABLES, "half", tables_2d_inputs),
    "tables-3d": (TABLES, "half", tables_3d_inputs),
}


def migrate(source, spelling="as written"):
    result = snippets.migrate(source, rules=[Rotary], status="changed", spelling=spelling)
    assert snippets.codes(result) == {"NPU310"}
    assert all(f.target == "torch_npu.npu_rotary_mul" for f in result.findings)
    return result.migrated


def run(source, args):
    namespace = {"__name__": "snippet"}
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
    return recorded(f"pattern.rotary.{mode}", dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype,spelling", [(torch.float32, "as written"), (torch.bfloat16, "as written"),
                                            (torch.float32, "low precedence")],
                         ids=["float32", "bfloat16", "float32-low-precedence"])
@pytest.mark.parametrize("case", list(CASES))
def test_rewrite_matches_the_original(case, dtype, spelling, npu):
    source, mode, make_inputs = CASES[case]
    args = [t.to(dtype) for t in make_inputs()]
    expected = as_tuple(run(source, args))
    got = as_tuple(run(migrate(source, spelling), args))
    assert npu and set(npu) == {mode}, "the fused kernel did not run"
    tol = tolerance(mode, dtype)
    for want, have in zip(expected, got):
        assert have.dtype == want.dtype and have.shape == want.shape
        torch.testing.assert_close(have, want, **tol)


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


@pytest.mark.slow
@pytest.mark.parametrize("case, args", [
    ("half-chunk-bsnd", lambda: (randn(S, D), *half_tables(S))),  # 3-D x: the kernel takes 4-D only
    ("half-bnsd-gqa", lambda: (randn(B, N, S, 6 + 1), randn(B, 1, S, 7), torch.ones(B, S, 7), torch.zeros(B, S, 7))),  # odd D
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_rotation_of_a_cast_x_runs_the_kernel_in_the_cast_dtype(dtype, npu):
    """``x.float() * cos + rotate_half(x).float() * sin`` with float32 tables: the kernel gets x cast
    once; the guard reads x's shape without casting it."""
    x, cos, sin = interleaved_inputs()
    args = (x.to(dtype), cos, sin)
    want, got = run(CAST, args), run(migrate(CAST), args)
    assert npu == ["interleave"] and 'x, torch.float32, cos, sin, "interleave", site=' in ' '.join(migrate(CAST).split())
    assert got.dtype == want.dtype == dtype
    tol = tolerance("interleave", dtype)
    torch.testing.assert_close(got, want, **tol)


def test_litgpt_rotation_statements_move_into_the_fallback():
    """The fused path does not compute the rotation: its statements are in the else branch only."""
    migrated = migrate(LITGPT)
    fused, fallback = migrated.split("else:")
    assert "torch.cat((-x2, x1)" not in fused and "torch.cat((-x2, x1)" in fallback
    assert 'if npu_glue.rotary_fits(x, cos, sin, "half", site="snippet.py:' in fused and "cos = cos.view(*new_shape)" in fused


@pytest.mark.slow
def test_gptj_model_fuses_both_rotary_implementations():
    source = (Path(__file__).parents[2] / "fixtures" / "models" / "gptj" / "modeling_gptj.py").read_bytes()
    result = snippets.migrate(source, "modeling_gptj.py", rules=[Rotary])
    rotary = [f for f in result.findings if f.code.startswith("NPU31")]  # (the residual pass reports the attention)
    assert sorted(f.api for f in rotary) == ["pattern.rotary.complex"] * 2 + ["pattern.rotary.interleave"]
    assert all(f.code == "NPU310" and f.action == "rewritten" for f in rotary)


# -- pair tables and complex freqs_cis --------------------------------------------------------------
PACKED = '''
import torch


def f(x, cache):
    seq_len = x.size(1)
    rope_cache = cache[:seq_len]
    xshaped = x.float().reshape(*x.shape[:-1], -1, 2)
    rope_cache = rope_cache.view(-1, xshaped.size(1), 1, xshaped.size(3), 2)
    x_out = torch.stack(
        [
            xshaped[..., 0] * rope_cache[..., 0] - xshaped[..., 1] * rope_cache[..., 1],
            xshaped[..., 1] * rope_cache[..., 0] + xshaped[..., 0] * rope_cache[..., 1],
        ],
        -1,
    )
    x_out = x_out.flatten(3)
    return x_out.type_as(x)
'''

TILED = '''
import torch


def f(x, cache, tiles=2):
    bsz, _, n_h, h_d = x.shape
    xshaped = x.float().reshape(bsz, tiles, -1, n_h, h_d // 2, 2)
    seq_len = xshaped.size(2)
    rope_cache = cache[:seq_len].view(1, 1, seq_len, 1, h_d // 2, 2)
    x_out = torch.stack([xshaped[..., 0] * rope_cache[..., 0] - xshaped[..., 1] * rope_cache[..., 1],
                         xshaped[..., 1] * rope_cache[..., 0] + xshaped[..., 0] * rope_cache[..., 1]], -1)
    x_out = x_out.reshape(bsz, tiles * seq_len, n_h, h_d)
    return x_out.type_as(x)
'''

HALVES = '''
import torch


def f(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    a = x1 * cos - x2 * sin
    b = x2 * cos + x1 * sin
    return torch.cat((a, b), dim=-1)
'''

MISTRAL = '''
import torch


def f(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis[:, None, :]
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(-2)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(-2)
    return xq_out.type_as(xq), xk_out.type_as(xk)
'''

META = '''
import torch


def reshape_for_broadcast(freqs_cis, x):
    ndim = x.ndim
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def f(xq, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(freqs_cis * xq_).flatten(3)
    return xq_out.type_as(xq)
'''


DEEPSEEK = '''
import torch


def f(q, cos, sin, unsqueeze_dim=1):
    cos = cos[..., : cos.shape[-1] // 2].unsqueeze(unsqueeze_dim)
    sin = sin[..., : sin.shape[-1] // 2].unsqueeze(unsqueeze_dim)
    q1, q2 = q[..., 0::2], q[..., 1::2]
    return torch.cat([q1 * cos - q2 * sin, q2 * cos + q1 * sin], dim=-1)
'''


def packed_cache(rows):
    a = angles(rows, D)
    return torch.stack([a.cos(), a.sin()], dim=-1)  # [rows, D // 2, 2]


def polar(rows):
    return torch.polar(torch.ones(rows, D // 2), angles(rows, D))


TABLE_CASES = {
    "torchtune-packed": (PACKED, lambda dt: (randn(B, S, N, D).to(dt), packed_cache(16).to(dt))),
    "torchtune-tiled-vision": (TILED, lambda dt: (randn(B, 2 * S, N, D).to(dt), packed_cache(S).to(dt))),
    "halves-pair-tables": (HALVES, lambda dt: (randn(B, S, N, D).to(dt), angles(S, D).cos().to(dt),
                                              angles(S, D).sin().to(dt))),
    "mistral-complex-3d": (MISTRAL, lambda dt: (randn(S, N, D).to(dt), randn(S, 1, D, seed=1).to(dt), polar(S))),
    "meta-complex-4d": (META, lambda dt: (randn(B, S, N, D).to(dt), polar(S))),
    "deepseek-split": (DEEPSEEK, lambda dt: (randn(B, N, S, D).to(dt), *half_tables(B, S))),
}


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", list(TABLE_CASES))
def test_pair_and_complex_tables_match_the_original(case, dtype, npu):
    source, make_inputs = TABLE_CASES[case]
    args = make_inputs(dtype)
    expected = as_tuple(run(source, args))
    got = as_tuple(run(migrate(source), args))
    mode = "half" if case.startswith(("halves", "deepseek")) else "interleave"  # DeepSeek's even|odd output: halves
    assert npu and set(npu) == {mode}, "the fused kernel did not run"
    tol = tolerance(mode, dtype)
    for want, have in zip(expected, got):
        assert have.dtype == want.dtype and have.shape == want.shape
        torch.testing.assert_close(have, want, **tol)


@pytest.mark.parametrize("case", ["torchtune-packed", "meta-complex-4d"])
def test_pair_and_complex_gradients_match(case, npu):
    source, make_inputs = TABLE_CASES[case]
    results = []
    for code in (source, migrate(source)):
        x, table = make_inputs(torch.float32)
        x.requires_grad_()
        run(code, (x, table)).square().sum().backward()
        results.append(x.grad)
    assert npu
    torch.testing.assert_close(results[1], results[0])


def test_tables_are_derived_from_the_current_values_on_every_call(npu, monkeypatch):
    """Four layers share one cache: the per-channel tables are made on every call (never kept: a
    cache buffer written through ``.data`` keeps its identity and version), so a change shows at once."""
    migrated = migrate(PACKED)
    import npu_glue

    made = []
    widen = npu_glue._widen
    monkeypatch.setattr(npu_glue, "_widen", lambda *a: (made.append(1), widen(*a))[1])
    x, cache = TABLE_CASES["torchtune-packed"][1](torch.float32)
    for _ in range(4):
        run(migrated, (x, cache))
    assert len(made) == 4 and len(npu) == 4
    tol = tolerance("interleave", torch.float32)
    cache.data.mul_(0.5)
    torch.testing.assert_close(run(migrated, (x, cache)), run(PACKED, (x, cache)), **tol)


@pytest.mark.parametrize("case, args, mode", [
    ("half-bnsd-gqa", lambda: (*llama_inputs()[:2], *(t * 1.5 for t in llama_inputs()[2:])), "half"),
    ("mistral-complex-3d", lambda: (randn(S, N, D), randn(S, 1, D), polar(S) * 1.5), "interleave"),
    ("halves-pair-tables", lambda: (randn(B, S, N, D), angles(S, D).cos() * 1.5, angles(S, D).sin()), "half"),
])
def test_scaled_tables_fuse(case, args, mode, npu):
    """Tables outside [-1, 1] (YaRN's attention factor, xPos, complex numbers off the unit circle): the
    kernel computes x * r1 + rotate(x) * r2 for any values, so the guard does not read them."""
    source = (CASES.get(case) or TABLE_CASES[case])[0]
    inputs = args()
    expected = as_tuple(run(source, inputs))
    got = as_tuple(run(migrate(source), inputs))
    assert npu and set(npu) == {mode}
    tol = tolerance(mode, torch.float32)
    for want, have in zip(expected, got):
        torch.testing.assert_close(have, want, **tol)


@pytest.mark.parametrize("case, args", [
    ("mistral-complex-3d", lambda: (randn(S, N, D), randn(S, 1, D), polar(S).to(torch.complex128))),  # complex128
    ("torchtune-packed", lambda: (randn(1, S, 1, 896), torch.stack([angles(16, 896).cos(), angles(16, 896).sin()], -1))),  # D >= 896
])
def test_table_guards_run_the_original_when_the_kernel_does_not_fit(case, args, npu):
    source = TABLE_CASES[case][0]
    inputs = args()
    expected = as_tuple(run(source, inputs))
    got = as_tuple(run(migrate(source), inputs))
    assert not npu, "the kernel ran on inputs it does not take"
    for want, have in zip(expected, got):
        assert have.dtype == want.dtype and torch.equal(have, want)
