"""Golden functions for the emulated kernels, written from torch_npu's documented semantics.

Each function restates what the torch_npu docs and the golden functions of torch_npu's own tests
specify (the facts, not their code), independently of ``kernels/``: plain float32/float64 math, the
documented formulas, ``stable`` sorts where the upstream goldens sort stably. ``UPSTREAM_*`` are the
shapes and dtypes those upstream tests run. Attention has its own golden module, ``attention_ref``.

Sources: ``opmap/reference`` facts (§2.5 norms and activations, §2.4 rotary, §2.7 MoE gating);
torch_npu tests ``test_npu_rms_norm.py``, ``test_npu_rotary_mul.py``,
``test_npu_moe_gating_top_k_softmax.py``, ``test_npu_moe_gating_top_k.py``; the aclnn pages
``aclnnMoeGatingTopKSoftmaxV2`` and ``aclnnMoeGatingTopK`` (CANN 8.5).
"""

from __future__ import annotations

import torch

# --------------------------------------------------------------------------- rms_norm

#: test_npu_rms_norm.py: x uniform(0, 100) [1024, 12288], gamma [12288]; float32, and float16 x
#: with a float32 gamma ("mix_dtype").
UPSTREAM_RMS_NORM = [((1024, 12288), torch.float32, torch.float32), ((1024, 12288), torch.float16, torch.float32)]


def rms_norm(x, gamma, eps=1e-6):
    """``rstd = 1 / sqrt(mean(x32 ** 2, -1) + eps)``; ``y = (x32 * rstd * gamma32)`` rounded to x's dtype."""
    x32, g32 = x.float(), gamma.float()
    rstd = 1 / torch.sqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return (x32 * rstd * g32).to(x.dtype), rstd


# --------------------------------------------------------------------------- rotary

#: test_npu_rotary_mul.py: (x, r1) shapes, half mode then interleave mode; float16 and float32.
UPSTREAM_ROTARY_HALF = [((2, 8192, 5, 128), (1, 8192, 1, 128)), ((8192, 2, 5, 128), (8192, 1, 1, 128)),
                        ((2048, 4, 32, 64), (2048, 4, 1, 64))]
UPSTREAM_ROTARY_INTERLEAVE = [((2, 2, 5, 128), (1, 2, 1, 128)), ((2, 24, 5, 128), (1, 1, 5, 128)),
                              ((128, 4, 4, 256), (1, 1, 4, 256)), ((64, 8, 8, 512), (1, 1, 8, 512))]


def rotary_mul(x, r1, r2, mode="half"):
    """half: ``x1, x2 = chunk(x, 2, -1); x_new = cat(-x2, x1)``; interleave: ``x_new`` pairs
    ``(-x[..., 1::2], x[..., ::2])`` stacked on a new last dim and flattened; ``r1*x + r2*x_new``."""
    if mode == "half":
        x1, x2 = torch.chunk(x, 2, -1)
        x_new = torch.cat((-x2, x1), dim=-1)
    else:
        x_new = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).reshape(x.shape)
    return r1 * x + r2 * x_new


# --------------------------------------------------------------------------- swiglu

def swiglu(x, dim=-1):
    """``A, B = x.chunk(2, dim)`` (A the first half); ``A * sigmoid(A) * B`` in float32, rounded once."""
    a, b = x.float().chunk(2, dim)
    return (a * torch.sigmoid(a) * b).to(x.dtype)


# --------------------------------------------------------------------------- MoE gating

#: test_npu_moe_gating_top_k_softmax.py: rows n, k, experts col; float16 and float32; a random
#: ``finished`` flag per row.
UPSTREAM_GATING_ROWS, UPSTREAM_GATING_K, UPSTREAM_GATING_EXPERTS = (10, 430, 520), (2, 4, 5, 9), (200, 1256, 5120)

#: test_npu_moe_gating_top_k.py: (rows, dtype, k); 256 experts, bias, k_group 4, group_count 8,
#: group_select_mode 1 (top-2 sum), norm_type 1 (sigmoid), renorm 0, scaling 1.0, eps 1e-20.
UPSTREAM_GROUPED_TOP_K = [(8, torch.float32, 6), (1002, torch.float16, 1), (128, torch.bfloat16, 16)]


def stable_top_k(values, k):
    """Indices of the k largest values per row; among equal values the lower index first (the
    goldens' ``argsort(-x, kind='stable')``)."""
    return torch.sort(values, dim=-1, descending=True, stable=True).indices[..., :k]


def gating_top_k_softmax(x, finished, k):
    """float32 softmax over the experts; stable top-k; finished rows get expert index E;
    ``row_idx[i, j] = j * rows + i``; y in x's dtype, indices int32."""
    probs = torch.softmax(x.float(), dim=-1)
    idx = stable_top_k(probs, k)
    y = probs.gather(-1, idx)
    if finished is not None:
        idx = idx.masked_fill(finished.unsqueeze(-1), x.shape[-1])
    rows = y.numel() // k
    row_idx = (torch.arange(k) * rows + torch.arange(rows).unsqueeze(1)).reshape(y.shape)
    return y.to(x.dtype), idx.int(), row_idx.int()


def gating_top_k_softmax_v2(x, k, finished=None, renorm=0, output_softmax=False):
    """renorm 0: ``softmax -> topK`` (and the float32 softmax as 3rd output when asked);
    renorm 1: ``topK(x) -> softmax`` over the k selected logits (3rd output empty)."""
    if renorm == 0:
        probs = torch.softmax(x.float(), dim=-1)
        idx = stable_top_k(probs, k)
        y = probs.gather(-1, idx)
        third = probs if output_softmax else torch.empty(0)
    else:
        idx = stable_top_k(x.float(), k)
        y = torch.softmax(x.float().gather(-1, idx), dim=-1)
        third = torch.empty(0)
    if finished is not None:
        idx = idx.masked_fill(finished.unsqueeze(-1), x.shape[-1])
    return y.to(x.dtype), idx.int(), third


def gating_top_k(x, k, bias=None, k_group=1, group_count=1, group_select_mode=0, norm_type=0,
                 out_flag=False, routed_scaling_factor=1.0, eps=1e-20):
    """aclnnMoeGatingTopK: ``norm = softmax(x) | sigmoid(x)`` (norm_type 0 | 1) in float32;
    selection values ``norm + bias``; with group_count > 1 the experts split into groups scored by
    their max (mode 0) or top-2 sum (mode 1), the best k_group groups kept (stable) and the rest
    set to -inf; experts = stable top-k of the selection values; ``y = norm[experts]`` (unbiased),
    divided by ``sum(y) + eps`` for sigmoid scores, times routed_scaling_factor; third output the
    float32 norm when out_flag."""
    norm = torch.softmax(x.float(), -1) if norm_type == 0 else torch.sigmoid(x.float())
    value = norm + bias.float() if bias is not None else norm
    if group_count > 1:
        grouped = value.view(value.shape[0], group_count, -1)
        if group_select_mode == 0:
            score = grouped.amax(-1)
        else:
            score = torch.sort(grouped, -1, descending=True).values[..., :2].sum(-1)
        keep = torch.zeros_like(score, dtype=torch.bool).scatter_(1, stable_top_k(score, k_group), True)
        value = grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).view_as(value)
    idx = stable_top_k(value, k)
    y = norm.gather(-1, idx)
    if norm_type == 1:
        y = y / (y.sum(-1, keepdim=True) + eps)
    y = y * routed_scaling_factor
    return y.to(x.dtype), idx.int(), norm if out_flag else None
