"""The SDPA fast path of the emulated ``npu_fusion_attention``.

Where a call's semantics are exactly those of ``F.scaled_dot_product_attention``, the forward runs
torch's fused CPU flash kernel (``aten._scaled_dot_product_flash_attention_for_cpu``, the kernel
SDPA itself dispatches to on CPU), which returns the output and the row log-sum-exp in one pass,
with memory linear in S. Everything else keeps the blocked core (``kernels._attention_core``).

What maps (:func:`plan` says None for everything else):

* no ``pse``, no dropout (``keep_prob`` 1), a non-varlen layout (BNSD/BSND/BSH/SBH, viewed as BNSD),
  ``Dv == D`` (the fused kernel takes one head size), no empty dimension, a CPU backing device
  (the CUDA fused kernels are not wired up: a CUDA call keeps the blocked path);
* q, k and v with unit stride along D: the fused kernel reads each row as D consecutive elements
  without checking (given a ``transpose(-1, -2)`` view it returned values off by up to 3e38, where
  ``F.scaled_dot_product_attention`` on the same view is right; any other strides are fine). The
  op's inputs arrive contiguous (``kernels.registry``), so their BNSD views always qualify;
* GQA/MQA: the CPU flash kernel takes fewer key/value heads natively (no repeat);
* masks: none (sparse_mode, pre/next ignored, as on the NPU); the compressed causal mask with
  ``sparse_mode=2`` (causal anchored top-left: SDPA's ``is_causal``, whatever Sq and Skv) or
  ``sparse_mode=3`` (anchored bottom-right: ``is_causal`` when Sq == Skv, an explicit
  Sq x Skv mask when Sq < Skv; Sq > Skv leaves rows without keys, which the kernel zeroes: blocked);
  a bool/uint8 ``atten_mask`` with ``sparse_mode`` 1, or 0 with the default pre/next (no band),
  given as an additive mask (the flash kernel takes the query's dtype) provided no query row is
  masked whole (those rows are the emulator's mean of V / 0 and statistics ``MASKED``: blocked).
  ``sparse_mode`` 4 and mode 0 with a pre/next band keep the blocked path.

The softmax statistics: the fused kernel yields the log-sum-exp ``lse = max + log(sum)`` of each
row, not its max; the true row max would take a second Q K^T pass, which on CPU costs as much as the
whole SDPA call (measured: 0.56 s vs 0.55 s at S=4096, N=8, D=128, one thread). So the fast path
returns them in their log-sum-exp form, ``softmax_max = lse`` and ``softmax_sum = 1``: the same
``max + log(sum)`` pair, which is all that their consumers read (``npu_fusion_attention_grad``
recomputes the probabilities as ``exp(s - max) / sum``; combining partial results, as ring attention
does, rescales by ``sum * exp(max)``), but not the row max itself; the blocked path returns the
true row max and sum. The choice depends only on the call's semantics, never on whether it records
a backward: a compiled training step (whose forward graph runs on tensors that need no grad) must
get the same statistics as eager autograd (``torch.library.opcheck`` compares them). Calls on the
fast path are differentiable through the fused kernel's own backward when called directly, and
through ``npu_fusion_attention_grad`` (fed these statistics, exact) via ``torch.ops.npu``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from . import _attention_core as core

_FLASH_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
#: False sends every call down the blocked path (the tests of the blocked core set it)
ENABLED = True


@dataclass(frozen=True)
class SdpaPlan:
    """How one call maps onto SDPA: ``is_causal`` (aligned top-left) or an explicit mask."""

    is_causal: bool = False
    masked_out: Optional[torch.Tensor] = None  # bool, True = masked out, broadcastable to [B, N, Sq, Skv]


def _maps(call) -> bool:
    q, k, v = call.q, call.k, call.v
    return (call.pse is None and call.keep_prob >= 1 and not call.varlen and q.device.type == "cpu"
            and v.shape[3] == q.shape[3] and min(q.shape) > 0 and k.shape[2] > 0
            and all(t.stride(3) == 1 for t in (q, k, v)))


def plan(call) -> Optional[SdpaPlan]:
    """The SDPA form of a validated call (``FaCall``), or None where its semantics do not map."""
    if not (ENABLED and _maps(call)):
        return None
    sq, skv = call.q.shape[2], call.k.shape[2]
    if call.compressed:
        if call.sparse_mode == 2:
            return SdpaPlan(is_causal=True)
        if call.sparse_mode == 3 and sq == skv:
            return SdpaPlan(is_causal=True)
        if call.sparse_mode == 3 and sq < skv:
            return SdpaPlan(masked_out=core.sparse_band(3, call.pre, call.next, sq, skv).block(0, sq, 0, skv, call.q.device))
        return None
    if call.mask is None:
        return SdpaPlan()
    if core.sparse_band(call.sparse_mode, call.pre, call.next, sq, skv) is not None:
        return None
    if bool(call.mask.all(-1).any()):  # a row without keys: the emulator's dead-row semantics
        return None
    return SdpaPlan(masked_out=call.mask)


def attention(call, how: SdpaPlan) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(out [B, N, Sq, D] in q's dtype, softmax_max, softmax_sum [B, N, Sq] float32)`` of the
    call through the fused kernel; the statistics in log-sum-exp form (see the module doc)."""
    q = call.q
    bias = None
    if how.masked_out is not None:
        bias = torch.zeros(how.masked_out.shape, dtype=q.dtype, device=q.device).masked_fill_(how.masked_out, float("-inf"))
    out, lse = _FLASH_CPU(q, call.k, call.v, 0.0, how.is_causal, attn_mask=bias, scale=call.scale)
    lse = lse.float()
    return out, lse, torch.ones_like(lse)
