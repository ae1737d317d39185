"""Per-call cost of npu_glue's derived-state design on the emulated NPU, each figure a ratio to the
unfused original measured in the same run (issue 18; the design is docs/design.md, "Derived state").

- Gated MLP ``act(gate(x)) * up(x)``, the candidates: the [gate; up] weight concatenated per call;
  the two activations concatenated per call (the chosen design: ``npu_glue.swiglu_linear``); one
  fused [gate; up] parameter held by the module, its state dict split back into the original's keys
  (no copy, but a different module); and, for reference, the weight kept between calls as the helper
  did before (fast, and stale after a fused optimizer step). Decode (1 token), prefill and a
  training step (forward and backward).
- Attention over a causal buffer: the buffer's values converted to the kernel's mask per call (chosen)
  against the compressed causal mode chosen once (before: wrong after ``fill_``/``load_state_dict``).
- An additive mask: the value check (one sync) and conversion per call (chosen) against a verdict
  and conversion kept between calls (before).
- Pair rotary tables (torchtune's packed cache): widened per call (chosen) against kept.

Timings are the minimum over interleaved rounds (the CPUs are shared). Emulated kernels run as Python
on the CPU: absolute figures say nothing about an NPU, the ratios between designs do about the copies.
Run: ``python benchmarks/derived_state_cost.py`` (also printed by ``benchmarks/state_changes.py``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from npu_migrate import kernels  # noqa: E402
from tests.full_helper import HELPERS  # noqa: E402 (the helper with every section, assembled)

H, I = 256, 688  # model dim and MLP width (Llama's 8/3 ratio)


def timed(candidates: Dict[str, Callable[[], object]], budget: float = 0.4, rounds: int = 5) -> Dict[str, float]:
    """Seconds per call of each candidate: the minimum over ``rounds`` interleaved rounds."""
    for fn in candidates.values():
        fn()
    start = time.perf_counter()
    next(iter(candidates.values()))()
    calls = max(1, int(budget / max(time.perf_counter() - start, 1e-6) / len(candidates)))
    best = dict.fromkeys(candidates, float("inf"))
    for _ in range(rounds):
        for name, fn in candidates.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / calls)
    return best


def row(label: str, times: Dict[str, float], base: str) -> str:
    first = times[base]
    return f"  {label:<28} {base} {first * 1e6:9.0f} us   " + "   ".join(
        f"{name} {t / first:5.2f}x" for name, t in times.items() if name != base)


class _KeptLinear(torch.autograd.Function):
    """The helper before issue 18: ``F.linear`` on a kept [gate; up] weight, gradients to the halves."""

    @staticmethod
    def forward(ctx, x, kept, wg, wu):
        ctx.save_for_backward(x, kept)
        return F.linear(x, kept)

    @staticmethod
    def backward(ctx, grad):
        x, kept = ctx.saved_tensors
        grad_w = (grad.reshape(-1, grad.shape[-1]).t() @ x.reshape(-1, x.shape[-1])).chunk(2)
        return grad @ kept, None, *grad_w


class FusedGateUp(nn.Module):
    """One [gate; up] parameter in place of two projections; its state dict holds the original's
    ``gate.weight`` and ``up.weight`` (split on save, joined on load)."""

    def __init__(self, gate: nn.Linear, up: nn.Linear):
        super().__init__()
        self.weight = nn.Parameter(torch.cat([gate.weight, up.weight]).detach().clone())
        self._register_state_dict_hook(FusedGateUp._split)
        self._register_load_state_dict_pre_hook(FusedGateUp._join)

    @staticmethod
    def _split(module, state, prefix, local_metadata):
        gate, up = state.pop(prefix + "weight").chunk(2)
        state[prefix + "gate.weight"], state[prefix + "up.weight"] = gate, up

    @staticmethod
    def _join(state, prefix, *args):
        if prefix + "gate.weight" in state:
            state[prefix + "weight"] = torch.cat([state.pop(prefix + "gate.weight"), state.pop(prefix + "up.weight")])

    def forward(self, x, npu):
        return npu.npu_swiglu(F.linear(x, self.weight), dim=-1)


def gated_mlp(glue, npu) -> List[str]:
    torch.manual_seed(0)
    gate, up = nn.Linear(H, I, bias=False), nn.Linear(H, I, bias=False)
    fused = FusedGateUp(gate, up)
    original = nn.Module()
    original.gate, original.up = gate, up
    fused.load_state_dict(original.state_dict())  # state-dict compatible both ways
    assert set(fused.state_dict()) == {"gate.weight", "up.weight"}
    kept = torch.cat([gate.weight, up.weight]).detach()
    lines = [f"gated MLP act(gate(x)) * up(x), H={H}, I={I}, float32 (ratios to the unfused original):"]
    for label, tokens, train in (("decode, 1 token", 1, False), ("prefill, 512 tokens", 512, False),
                                 ("train step, 512 tokens", 512, True)):
        x = torch.randn(tokens, H, requires_grad=train)

        def run(fn):
            def call():
                with torch.set_grad_enabled(train):
                    out = fn()
                    if train:
                        out.sum().backward()
            return call

        times = timed({
            "unfused": run(lambda: F.silu(gate(x)) * up(x)),
            "weights/call": run(lambda: npu.npu_swiglu(F.linear(x, torch.cat([gate.weight, up.weight])), dim=-1)),
            "activations/call (chosen)": run(lambda: glue.swiglu_linear(F.silu, gate, up, x)),
            "fused parameter": run(lambda: fused(x, npu)),
            "kept weight (stale)": run(lambda: npu.npu_swiglu(_KeptLinear.apply(x, kept, gate.weight, up.weight), dim=-1)),
        })
        lines.append(row(label, times, "unfused"))
    return lines


def causal_buffer(glue, npu) -> List[str]:
    b, n, t, d = 2, 4, 128, 32
    q, k, v = (torch.randn(b, n, t, d, generator=torch.Generator().manual_seed(s)) for s in range(3))
    bias = torch.tril(torch.ones(256, 256)).view(1, 1, 256, 256)
    scale = d ** -0.5

    def original():
        att = (q @ k.transpose(-2, -1) * scale).masked_fill(bias[:, :, :t, :t] == 0, float("-inf"))
        return att.softmax(-1) @ v

    def chosen():
        causal = bias[:, :, :t, :t]
        assert glue.can_fuse(q, k, v, causal=causal)
        return npu.npu_fusion_attention(q, k, v, n, "BNSD", atten_mask=glue.npu_mask(q, k, causal=causal), scale=scale)[0]

    def before():
        return npu.npu_fusion_attention(q, k, v, n, "BNSD", atten_mask=glue.causal_mask(q.device), sparse_mode=2,
                                        scale=scale)[0]

    times = timed({"eager": original, "buffer as mask/call (chosen)": chosen, "causal mode kept (stale)": before})
    return [f"attention over a causal buffer slice, B={b} N={n} T={t} D={d}:", row("inference", times, "eager")]


def additive_mask(glue, npu) -> List[str]:
    b, n, t, d = 2, 4, 128, 32
    q, k, v = (torch.randn(b, n, t, d, generator=torch.Generator().manual_seed(s)) for s in range(3))
    mask = torch.full((t, t), torch.finfo(torch.float32).min).triu(1)[None, None].expand(b, 1, t, t)
    kept = glue.npu_mask(q, k, additive=mask)

    def original():
        return (q @ k.transpose(-2, -1) * d ** -0.5 + mask).softmax(-1) @ v

    def chosen():
        assert glue.can_fuse(q, k, v, additive=mask)
        return npu.npu_fusion_attention(q, k, v, n, "BNSD", atten_mask=glue.npu_mask(q, k, additive=mask),
                                        scale=d ** -0.5)[0]

    def before():
        return npu.npu_fusion_attention(q, k, v, n, "BNSD", atten_mask=kept, scale=d ** -0.5)[0]

    times = timed({"eager": original, "check + convert/call (chosen)": chosen, "verdict kept (stale)": before})
    return [f"attention with an additive mask (finfo.min), B={b} N={n} T={t} D={d}:", row("inference", times, "eager")]


def pair_tables(glue, npu) -> List[str]:
    s, heads, d = 256, 8, 64
    x = torch.randn(2, s, heads, d)
    angles = torch.arange(s, dtype=torch.float32)[:, None] * torch.rand(d // 2, generator=torch.Generator().manual_seed(0))
    cos, sin = angles.cos()[None, :, None], angles.sin()[None, :, None]
    wide_cos, wide_sin = (t.repeat_interleave(2, dim=-1) for t in (cos, sin))

    def original():
        pairs = x.reshape(*x.shape[:-1], d // 2, 2)
        x0, x1 = pairs[..., 0], pairs[..., 1]
        return torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], -1).flatten(-2)

    times = timed({"eager": original,
                   "widened/call (chosen)": lambda: glue.pair_rotary_mul(x, cos, sin, "interleave"),
                   "widened kept (stale)": lambda: npu.npu_rotary_mul(x, wide_cos, wide_sin, "interleave")})
    return [f"pair rotary tables (torchtune's packed cache), B=2 S={s} N={heads} D={d}:", row("inference", times, "eager")]


def report() -> List[str]:
    import torch._dynamo  # noqa: F401 - before the emulator patches torch (tests/helpers/migrated_models.py)

    torch.set_num_threads(1)
    lines = [f"== per-call cost on the emulated NPU (torch {torch.__version__}, CPU, 1 thread)"]
    with kernels.emulate():
        sys.path.insert(0, str(HELPERS))
        sys.modules.pop("npu_glue", None)
        try:
            import npu_glue
            import torch_npu

            for part in (gated_mlp, causal_buffer, additive_mask, pair_tables):
                lines += part(npu_glue, torch_npu)
        finally:
            sys.path.remove(str(HELPERS))
            sys.modules.pop("npu_glue", None)
    return lines


if __name__ == "__main__":
    print("\n".join(report()))
