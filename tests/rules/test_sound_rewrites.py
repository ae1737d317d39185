"""Rewrites that would change a result are refused or guarded, and rewrites of one block compose.

Each case is code in the style of real repositories (not transformers) that used to be migrated
wrongly: the migration runs with every rule, and the migrated code runs on the emulated NPU against
the original (on the emulated CUDA device) with the same inputs.
"""

import sys
import textwrap
from contextlib import contextmanager

import pytest
import torch

from npu_migrate import kernels
from tests import snippets
from tests.full_helper import HELPERS



@contextmanager
def emulated_npu(calls):
    """The emulated NPU with the vendored helper importable; ``calls`` collects the fused kernels called."""
    with kernels.emulate():
        sys.path.insert(0, str(HELPERS))
        sys.modules.pop("npu_glue", None)
        import torch_npu

        names = ("npu_fusion_attention", "npu_swiglu", "npu_rms_norm", "npu_rotary_mul")
        real = {name: getattr(torch_npu, name) for name in names}
        for name in names:
            setattr(torch_npu, name, lambda *a, _n=name, **k: (calls.append(_n), real[_n](*a, **k))[1])
        try:
            yield
        finally:
            for name, fn in real.items():
                setattr(torch_npu, name, fn)
            sys.path.remove(str(HELPERS))
            sys.modules.pop("npu_glue", None)


@pytest.fixture
def fused_calls():
    return []


def migrate(source):
    return snippets.migrate(textwrap.dedent(source), "m.py", status=("changed", "unchanged"))


def namespace(text, name):
    space = {"__name__": name}
    exec(compile(text, name, "exec"), space)
    return space


def run_both(source, result, build, inputs, calls):
    """(original output, migrated output) of ``build(namespace)(*inputs)`` with the same weights:
    the original on the emulated CUDA device, the migrated code on the emulated NPU."""
    with kernels.emulate_cuda():
        torch.manual_seed(0)
        want = build(namespace(textwrap.dedent(source), "original"))(*inputs)
    migrated_text = result.migrated if result.status == "changed" else textwrap.dedent(source)
    with emulated_npu(calls):
        torch.manual_seed(0)
        got = build(namespace(migrated_text, "migrated"))(*inputs)
    return want, got


def by_code(result):
    return {(f.code, f.action) for f in result.findings}


COMBINED = """
import math
import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.gate = nn.Linear(dim, 64, bias=False)
        self.up = nn.Linear(dim, 64, bias=False)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)

    def forward(self, x):
        g = F.silu(self.gate(x))
        u = self.up(x)
        y = g * u
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        probs = F.softmax(scores, dim=-1)
        out = torch.matmul(probs, v)
        return out.cuda(), y
"""


@pytest.mark.slow
def test_a_block_with_swiglu_attention_and_cuda_keeps_every_rewrite(fused_calls):
    result = migrate(COMBINED)
    rewritten = {f.code for f in result.findings if f.action == "rewritten"}
    assert {"NPU330", "NPU302", "NPU203"} <= rewritten
    text = result.migrated
    assert "npu_glue.swiglu_linear(F.silu, self.gate, self.up, x, site=" in text
    assert "out.npu()" in text and ".cuda()" not in text
    assert "npu_glue.fusion_attention(" in text
    x = torch.randn(2, 6, 32)
    want, got = run_both(COMBINED, result, lambda ns: ns["Block"](), (x,), fused_calls)
    for w, g in zip(want, got):
        torch.testing.assert_close(g.cpu(), w.cpu(), rtol=1e-5, atol=1e-5)
    assert {"npu_swiglu", "npu_fusion_attention"} <= set(fused_calls)


MASK_REDEFINED = """
import math
import torch


def attend(q, k, v, mask):
    b, _, _, d = q.shape
    k_len = k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    mask = (mask == 0).view(b, 1, 1, k_len).expand(scores.shape)
    scores = scores.masked_fill(mask, -float("inf"))
    probs = torch.softmax(scores, dim=-1)
    out = probs @ v
    return out
"""

SCALE_DEFINED_INSIDE = """
import torch


def attend(q, k, v):
    d = q.shape[-1]
    scores = torch.matmul(q, k.transpose(-2, -1))
    inv_scale = torch.full((), d ** 0.5, dtype=scores.dtype)
    scores = scores / inv_scale
    probs = scores.softmax(dim=-1)
    out = torch.matmul(probs, v)
    return out
"""

VALUE_RECAST = """
import torch


def attend(q, k, v):
    scores = torch.matmul(q, k.transpose(-2, -1)) * 0.125
    p = torch.softmax(scores, dim=-1)
    p = p.to(torch.float16)
    v = v.to(p.dtype)
    out = torch.matmul(p, v)
    return out
"""


@pytest.mark.parametrize("source, name", [(MASK_REDEFINED, "the mask"), (SCALE_DEFINED_INSIDE, "the scale"),
                                          (VALUE_RECAST, "the value")], ids=["mask", "scale", "value"])
def test_attention_whose_moved_statements_redefine_what_the_kernel_reads_is_reported(fused_calls, source, name):
    result = migrate(source)
    assert ("NPU302", "rewritten") not in by_code(result)
    (reported,) = [f for f in result.findings if f.code == "NPU303"]
    assert reported.message.startswith("attention not fused: ") and reported.fallback is not None
    assert "fused call" in reported.message  # why: what the fused call would need does not exist yet
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))
    mask = torch.ones(1, 5, dtype=torch.long)
    mask[0, -2:] = 0
    args = (q, k, v, mask) if "mask" in source.split("def attend")[1].split(")")[0] else (q, k, v)
    want, got = run_both(source, result, lambda ns: ns["attend"], args, fused_calls)
    torch.testing.assert_close(got, want)
    assert got.dtype == want.dtype


PER_HEAD_SCALE = """
import torch


def attend(q, k, v, scale):
    scores = torch.matmul(q, k.transpose(-2, -1)) / scale
    probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs, v)
    return out
"""


@pytest.mark.parametrize("scale, fused", [(torch.full((2, 1, 1), 3.0), False), (torch.tensor(3.0), True), (3.0, True)],
                         ids=["per-head", "0-d", "float"])
def test_a_tensor_scale_is_fused_only_when_it_is_a_scalar(fused_calls, scale, fused):
    result = migrate(PER_HEAD_SCALE)
    assert ("NPU302", "rewritten") in by_code(result)
    assert "scale=scale" in result.migrated.split("npu_glue.can_fuse(")[1].split(")")[0]
    q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))
    want, got = run_both(PER_HEAD_SCALE, result, lambda ns: ns["attend"], (q, k, v, scale), fused_calls)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert ("npu_fusion_attention" in fused_calls) is fused


SOFTMAX_IN_FLOAT32 = """
import torch


def attend(q, k, v):
    scores = torch.matmul(q, k.transpose(-2, -1)) * 0.25
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
    out = torch.matmul(probs, v)
    return out
"""


def test_the_fused_output_has_the_original_dtype(fused_calls):
    """bfloat16 q and k with float32 v: the original returns float32; the fused path may not return
    q's bfloat16 (the guard sends it to the original code)."""
    result = migrate(SOFTMAX_IN_FLOAT32)
    assert ("NPU302", "rewritten") in by_code(result)
    q, k = (torch.randn(1, 2, 4, 8).to(torch.bfloat16) for _ in range(2))
    v = torch.randn(1, 2, 4, 8)
    want, got = run_both(SOFTMAX_IN_FLOAT32, result, lambda ns: ns["attend"], (q, k, v), fused_calls)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want)
