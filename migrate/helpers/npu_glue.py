"""Glue for code migrated to Ascend NPUs by npu-migrate (vendored: part of your diff, edit freely).

The fused ``torch_npu`` kernels are exact replacements only under conditions that are known at run
time (dtype, rank, head dim, mask values). The functions here check those conditions and convert
masks to the NPU convention; every migrated call site falls back to its original code when they
do not hold. Imports only torch, torch_npu and math.
"""

import math
from functools import lru_cache

import torch
import torch_npu

#: Largest head dim and head count npu_fusion_attention takes.
MAX_HEAD_DIM = 768
MAX_HEADS = 256
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)


@lru_cache(maxsize=None)
def causal_mask(device):
    """The compressed 2048x2048 mask that sparse_mode 2/3 take (True = masked), built once per device."""
    return torch.triu(torch.ones(2048, 2048, dtype=torch.bool, device=device), diagonal=1)


def _shapes_fit(query, key, value, enable_gqa=True):
    """q/k/v are [B, N, S, D] tensors of one float dtype npu_fusion_attention accepts."""
    if not (query.dim() == key.dim() == value.dim() == 4):
        return False
    if query.dtype not in _FLOATS or key.dtype != query.dtype or value.dtype not in _FLOATS:
        return False
    (b, nq, _, d), (bk, nk, sk, dk), (bv, nv, sv, dv) = query.shape, key.shape, value.shape
    heads_ok = nq == nk if not enable_gqa else nk >= 1 and nq % nk == 0
    return (b == bk == bv and heads_ok and nk == nv and sk == sv and nq <= MAX_HEADS
            and 1 <= d == dk <= MAX_HEAD_DIM and dv <= dk and query.device == key.device == value.device)


def _broadcasts(mask, query, key):
    """``mask`` broadcasts to the [B, N, Sq, Skv] scores without growing them."""
    scores = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    if mask.dim() > 4:
        return False
    return all(m in (1, s) for m, s in zip(mask.shape[::-1], scores[::-1]))


def _fit(masked, query, key):
    """``masked`` expanded to a shape npu_fusion_attention takes: [B, 1 or N, Sq, Skv]."""
    while masked.dim() < 4:
        masked = masked.unsqueeze(0)
    b, n, sq, skv = query.shape[0], query.shape[1], query.shape[2], key.shape[2]
    return masked.expand(b, n if masked.shape[1] != 1 else 1, sq, skv)


def _terms(query, key, additive, masked, keep):
    """The mask terms as bool tensors (True = masked out), or None when one cannot be converted."""
    terms = []
    for mask, kind in ((additive, "additive"), (masked, "masked"), (keep, "keep")):
        if mask is None:
            continue
        if not torch.is_tensor(mask) or not _broadcasts(mask, query, key):
            return None
        if kind == "additive":
            if not mask.is_floating_point():
                return None
            term = mask <= torch.finfo(mask.dtype).min / 2  # "minus infinity": -inf or about dtype min
            if not bool(((mask == 0) | term).all()):  # only 0 and minus infinity convert exactly
                return None
        else:
            if mask.dtype != torch.bool:
                return None
            term = mask if kind == "masked" else ~mask
        terms.append(_fit(term, query, key))
    return terms


def can_fuse(query, key, value, *, additive=None, masked=None, keep=None, causal=None):
    """True when npu_fusion_attention computes what the eager attention code does.

    ``additive``: a float mask added to the scores (only 0 and values <= dtype min / 2 convert);
    ``masked``: a bool mask, True = masked out (``masked_fill(cond, -inf)``); ``keep``: a bool mask,
    True = attend (``torch.where(keep, w, min)``); ``causal``: the lower-triangular buffer slice the
    code applies, which must cover the whole [Sq, Skv] score matrix. A row with every key masked
    makes the eager softmax NaN or uniform, which the kernel does not reproduce: those fall back.
    """
    if not _shapes_fit(query, key, value):
        return False
    if causal is not None and (tuple(causal.shape[-2:]) != (query.shape[2], key.shape[2]) or query.shape[2] > key.shape[2]):
        return False
    terms = _terms(query, key, additive, masked, keep)
    if terms is None:
        return False
    if terms:
        dead = terms[0]
        for term in terms[1:]:
            dead = dead | term
        if bool(dead.all(dim=-1).any()):
            return False
    return True


def npu_mask(query, key, *, additive=None, masked=None, keep=None):
    """The NPU ``atten_mask`` (bool, True = masked out) for masks ``can_fuse`` accepted."""
    terms = _terms(query, key, additive, masked, keep)
    if not terms:
        return None
    combined = terms[0]
    for term in terms[1:]:
        combined = combined | term
    return combined


def attention_weights_requested(module, kwargs):
    """Whether a Hugging Face model asked for the attention probabilities (``output_attentions``).

    transformers records them from the attention module's output only when ``output_attentions``
    is passed to the call (it then reaches the attention function's ``**kwargs``) or set in the
    config; otherwise they are discarded, and the fused kernel (which does not form them) may run.
    """
    requested = kwargs.get("output_attentions")
    if requested is None:
        requested = getattr(getattr(module, "config", None), "output_attentions", False)
    return bool(requested)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    """``torch.nn.functional.scaled_dot_product_attention`` on the fused NPU kernel when it is exact.

    Differences handled here: the NPU mask is True = masked out (an SDPA bool mask is True =
    attend); SDPA's ``is_causal`` is aligned top-left, which is sparse_mode 2 with the compressed
    mask; the NPU scale defaults to 1.0, SDPA's to 1/sqrt(D); rows with every key masked give 0 in
    SDPA, which needs ``inner_precise=2``. Anything else runs the original SDPA.
    """
    fused = (
        _shapes_fit(query, key, value, enable_gqa)
        and (attn_mask is None or not is_causal)
        and 0.0 <= dropout_p < 1.0
    )
    atten_mask, sparse_mode, inner_precise = None, 0, 0
    if fused and is_causal:
        atten_mask, sparse_mode = causal_mask(query.device), 2
    elif fused and attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            terms = _terms(query, key, None, None, attn_mask)
            inner_precise = 2  # fully masked rows: 0, as in SDPA
        else:
            terms = _terms(query, key, attn_mask, None, None)
            # -inf rows give 0 in SDPA, dtype-min rows a uniform average: not converted
            fused = terms is not None and not bool(terms[0].all(dim=-1).any())
        fused = fused and terms is not None
        atten_mask = terms[0] if fused else None
    if not fused:
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
            enable_gqa=enable_gqa)
    return torch_npu.npu_fusion_attention(
        query, key, value, query.shape[1], "BNSD", atten_mask=atten_mask,
        scale=1 / math.sqrt(query.shape[-1]) if scale is None else scale,
        keep_prob=1.0 - dropout_p, sparse_mode=sparse_mode, inner_precise=inner_precise)[0]
