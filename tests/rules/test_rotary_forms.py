"""NPU310, the forms of issue 20: rewritten rotary code computes what the original computed, on the
emulated NPU.

Each snippet is migrated with the rotary rule only, then the original and the migrated function run
on the same inputs: float32 forward and backward (the gradients of x and of the tables), bfloat16
forward; the results agree within the op table's tolerance and the fused kernel ran in the mode the
form implies. The forms: the rotation by -θ (pair tables over halves or pairs, per-channel tables with
``x * cos - rotate_half(x) * sin``), a ``rotate_half(x, interleaved)`` choosing its mode from a flag at
run time (both values of the flag), halves split at a size the code gave the last dim (wav2vec2's
``self.head_size // 2`` with ``dim=x.ndim - 1``), halves unbound from ``view(B, nh, T, 2, hs // 2)`` and
from einops' ``(j d) -> j d``, and 2x2 rotation-matrix tables applied by columns, by ``@`` and by
``einsum``. Tiny shapes: B=2, S=5, N=3, D=8.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from npu_migrate.migrate.rules.rotary.rotary import Rotary
from tests import snippets
from tests.rules.emulated import emulated_npu, load
from tests.tolerances import recorded

B, S, N, D = 2, 5, 3, 8

NEG_THETA_HALVES = '''
import torch


def f(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    y1 = x1 * cos + x2 * sin
    y2 = -x1 * sin + x2 * cos
    return torch.cat([y1, y2], dim=-1)
'''

NEG_THETA_PAIRS = '''
import torch


def f(x, cos, sin):
    x0, x1 = x[..., ::2], x[..., 1::2]
    out = torch.stack((x0 * cos + x1 * sin, x1 * cos - x0 * sin), dim=-1)
    return out.flatten(-2)
'''

NEG_THETA_FULL = '''
import torch


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def f(x, cos, sin):
    return x * cos - rotate_half(x) * sin
'''

SWITCHED = '''
import torch
from einops import rearrange


def rotate_half(x, interleaved=False):
    if not interleaved:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    else:
        x1, x2 = x[..., ::2], x[..., 1::2]
        return rearrange(torch.stack((-x2, x1), dim=-1), "... d two -> ... (d two)", two=2)


def f(x, cos, sin, interleaved):
    return x * cos + rotate_half(x, interleaved) * sin
'''

CONFORMER = '''
import torch


class SelfAttention:
    def __init__(self, num_heads, head_size):
        self.num_heads, self.head_size = num_heads, head_size

    def rotate(self, hidden_states, cos, sin):
        batch_size, sequence_length, hidden_size = hidden_states.size()
        hidden_states = hidden_states.view(batch_size, sequence_length, self.num_heads, self.head_size)
        hidden_states = hidden_states.transpose(0, 1)
        rotated_states_begin = hidden_states[..., : self.head_size // 2]
        rotated_states_end = hidden_states[..., self.head_size // 2 :]
        rotated_states = torch.cat((-rotated_states_end, rotated_states_begin), dim=rotated_states_begin.ndim - 1)
        hidden_states = (hidden_states * cos) + (rotated_states * sin)
        return hidden_states.transpose(0, 1)


def f(hidden_states, cos, sin):
    return SelfAttention(3, 8).rotate(hidden_states, cos, sin)
'''

UNBIND_VIEW = '''
import torch


def f(x, cos, sin):
    B, nh, T, hs = x.size()
    x1, x2 = x.view(B, nh, T, 2, hs // 2).unbind(-2)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin
'''

REARRANGE_HALVES = '''
import torch
from einops import rearrange


def rotate_half(x):  # rotary-embedding-torch's half rotation
    x = rearrange(x, "... (j d) -> ... j d", j=2)
    x1, x2 = x.unbind(dim=-2)
    return torch.cat((-x2, x1), dim=-1)


def f(t, cos, sin):
    return (t * cos) + (rotate_half(t) * sin)
'''

MATRIX_COLUMNS = '''
import torch
from einops import rearrange


def f(x, angles):
    cos, sin = angles.cos(), angles.sin()
    rot = torch.stack([cos, -sin, sin, cos], dim=-1)
    rot = rearrange(rot, "b n d (i j) -> b n d i j", i=2, j=2)
    xp = x.reshape(*x.shape[:-1], -1, 1, 2)
    out = rot[..., 0] * xp[..., 0] + rot[..., 1] * xp[..., 1]
    return out.reshape(*x.shape)
'''

MATRIX_MATMUL = '''
import torch


def f(x, theta):
    c, s = torch.cos(theta), torch.sin(theta)
    rot = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)
    pairs = x.unflatten(-1, (-1, 2))
    return (rot @ pairs.unsqueeze(-1)).squeeze(-1).flatten(-2)
'''

MATRIX_EINSUM = '''
import torch


def f(x, theta):
    c, s = theta.cos(), theta.sin()
    rot = torch.stack([c, s, -s, c], dim=-1).view(*theta.shape, 2, 2)  # [[c, s], [-s, c]]: by -θ
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    return torch.einsum("...ij,...j->...i", rot, pairs).flatten(-2)
'''


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def angles(rows, dim):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    return torch.outer(torch.arange(rows, dtype=torch.float32), inv_freq)


def pair_tables():
    a = angles(S, D)[:, None, :]  # [S, 1, D/2]: BSND, one angle per pair
    return randn(B, S, N, D), a.cos(), a.sin()


def half_tables():
    a = angles(S, D)
    a = torch.cat((a, a), dim=-1)[None, None]  # 11SD
    return randn(B, N, S, D), a.cos(), a.sin()


def interleaved_tables():
    a = angles(S, D).repeat_interleave(2, dim=-1)[None, :, None, :]  # 1S1D
    return randn(B, S, N, D), a.cos(), a.sin()


def conformer_tables():
    a = angles(S, D)
    a = torch.cat((a, a), dim=-1)[:, None, None, :]  # S11D for [S, B, N, D]
    return randn(B, S, N * D), a.cos(), a.sin()


def angle_table():
    return randn(B, S, N, D), angles(S, D)[None, :, None, :].expand(B, S, 1, D // 2).contiguous()


def angle_table_3d():
    return randn(B, N, S, D), angles(S, D)[None]  # [1, S, D/2]: "b n d" for a BNSD x


#: case: (source, inputs, extra arguments, the mode the kernel runs in)
CASES = {
    "negated-halves": (NEG_THETA_HALVES, pair_tables, (), "half"),
    "negated-pairs": (NEG_THETA_PAIRS, pair_tables, (), "interleave"),
    "negated-full": (NEG_THETA_FULL, half_tables, (), "half"),
    "switched-half": (SWITCHED, half_tables, (False,), "half"),
    "switched-interleave": (SWITCHED, interleaved_tables, (True,), "interleave"),
    "conformer-head-size": (CONFORMER, conformer_tables, (), "half"),
    "unbind-view": (UNBIND_VIEW, half_tables, (), "half"),
    "rearrange-halves": (REARRANGE_HALVES, half_tables, (), "half"),
    "matrix-columns": (MATRIX_COLUMNS, angle_table_3d, (), "interleave"),
    "matrix-matmul": (MATRIX_MATMUL, angle_table, (), "interleave"),
    "matrix-einsum": (MATRIX_EINSUM, angle_table, (), "interleave"),
}


def migrate(source):
    result = snippets.migrate(source, rules=[Rotary], status="changed")
    assert snippets.codes(result) == {"NPU310"}, [f.message for f in result.findings]
    assert all(f.action == "rewritten" for f in result.findings)
    return result.migrated


def call(source, args):
    return load(source)["f"](*args)


@contextmanager
def modes(torch_npu):
    """The rotary_mode of every npu_rotary_mul call made inside the block."""
    seen, real = [], torch_npu.npu_rotary_mul
    torch_npu.npu_rotary_mul = lambda *a, **k: (seen.append(a[3] if len(a) > 3 else k.get("rotary_mode", "half")),
                                                real(*a, **k))[1]
    try:
        yield seen
    finally:
        torch_npu.npu_rotary_mul = real


def run_both(case, dtype, grad=False):
    """[(result, gradients of the inputs, the modes the kernel ran in)] of the original and the migrated code."""
    source, make, extra, _ = CASES[case]
    tensors = [t.to(dtype) for t in make()]
    results = []
    with emulated_npu() as torch_npu:
        migrated = migrate(source)
        for code in (source, migrated):
            leaves = [t.clone().requires_grad_(grad) for t in tensors]
            with modes(torch_npu) as seen:
                out = call(code, [*leaves, *extra])
                grads = torch.autograd.grad(out.square().sum(), leaves) if grad else ()
            results.append((out, grads, seen))
    return results


@pytest.mark.parametrize("case", list(CASES))
def test_forward_and_backward_match_in_float32(case):
    (want, want_grads, unfused), (got, got_grads, fused) = run_both(case, torch.float32, grad=True)
    assert unfused == [] and fused == [CASES[case][3]], "the fused kernel did not run once in its mode"
    tol = recorded("pattern.rotary.half", torch.float32)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, **tol)
    for have, expected in zip(got_grads, want_grads):
        torch.testing.assert_close(have, expected, **tol)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_forward_matches_in_bfloat16(case):
    (want, _, _), (got, _, fused) = run_both(case, torch.bfloat16)
    assert fused == [CASES[case][3]]
    assert got.dtype == want.dtype == torch.bfloat16 and got.shape == want.shape
    torch.testing.assert_close(got, want, **recorded("pattern.rotary.half", torch.bfloat16))


@pytest.mark.parametrize("interleaved, make, mode", [(False, half_tables, "half"),
                                                     (True, interleaved_tables, "interleave")])
def test_the_flag_chooses_the_mode_at_run_time(interleaved, make, mode):
    """One migrated function, both values of the flag: the kernel runs in the mode each one selects."""
    with emulated_npu() as torch_npu:
        migrated = load(migrate(SWITCHED))["f"]
        with modes(torch_npu) as seen:
            got = migrated(*make(), interleaved)
    want = load(SWITCHED)["f"](*make(), interleaved)
    assert seen == [mode]
    torch.testing.assert_close(got, want, **recorded("pattern.rotary.half", torch.float32))


def test_the_rotation_by_minus_theta_is_not_the_rotation_by_theta():
    """The -θ forms differ from the +θ rotation on these inputs (the sign is read, not assumed)."""
    x, cos, sin = pair_tables()
    by_minus = call(NEG_THETA_HALVES, (x, cos, sin))
    by_plus = call(NEG_THETA_HALVES, (x, cos, -sin))
    assert not torch.allclose(by_minus, by_plus)
    with emulated_npu():
        torch.testing.assert_close(call(migrate(NEG_THETA_HALVES), (x, cos, -sin)), by_plus,
                                   **recorded("pattern.rotary.half", torch.float32))
