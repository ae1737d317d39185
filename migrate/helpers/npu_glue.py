"""Glue for code migrated to Ascend NPUs by npu-migrate (vendored: part of your diff, edit freely).

The fused ``torch_npu`` kernels are exact replacements only under conditions known at run time
(dtype, rank, head dim, mask values, a SiLU activation, no autograd for the inference-only
kernels). The functions here check those conditions and convert masks to the NPU convention; every
migrated call site falls back to its original code when they do not hold.

Derived state: nothing computed from a tensor's values is kept from one call to the next. A
model's parameters and buffers change in ways no cheap key sees: ``AdamW(fused=True)`` (and
``foreach=True`` on accelerators), ``torch._foreach_*`` ops and every ``p.data.copy_()`` leave the
version counter where it was; FSDP-style swaps and ``set_`` can land on a freed tensor's address;
``load_state_dict``, ``fill_`` and ``nn.init`` change a buffer proven causal where it was built. So:

- the gated MLP's gate and up projections run as the original runs them and their outputs are
  concatenated for npu_swiglu / npu_geglu (a copy of the activations per call, no [gate; up]
  weight kept);
- masks are converted to the NPU convention from their current values on every call (elementwise,
  on the device, no sync), a causal buffer included: the kernel gets the buffer's values as its
  mask, never a causal mode chosen from what the buffer held when the class was written;
- pair rotary tables are widened to per-channel tables on every call (S x D, not the activations);
- value conditions (an additive mask holds only 0 and minus infinity, no query row is masked
  entirely, an MoE bias is not negative) are checked on every call that needs them, all of a
  call's in one device->host sync, unless a rule proves them from code in the same call
  (``mask_values_proven``, ``live_rows_proven``); rotary tables are not checked at all (the kernel
  takes any values). Rows with every key masked (left padding) need no check where
  ``fusion_attention`` gives them the original's value on the device. Under ``torch.compile`` an
  unproven value condition is never evaluated: the original code runs, so the graph has no
  data-dependent branch.

Precision: under ``torch.autocast`` the fused calls compute in the precision the original's ops
run in: attention's q, k, v are cast to autocast's dtype (its matmuls and SDPA are on autocast's
lower-precision list), rotary computes in the promotion of x's and the tables' dtypes (its
elementwise products are on no list), RMSNorm takes a float32 weight with a half x.

The trade-off, measured on the emulator, is in npu-migrate's ``docs/design.md`` ("Derived state"):
per call, one copy of the gate and up activations, and one device->host sync where a mask's values
must be checked (a verdict kept per tensor cost one per forward), against caches that are silently
wrong after a fused optimizer step or a ``.data`` write.

What ran, per site: every guard gets its site, ``site="path:line:CODE"`` (the finding of
``migrate run`` that rewrote it), and counts per site the calls that took the fused path and, for
each call that fell back, the first precondition that failed (``site_counts()``; ``migrate parity``
reports them). Plain Python counters updated beside the computation: no device->host sync, and
skipped while ``torch.compile`` traces (compiled calls are not counted, the graph gets no Python
side effect). The environment variable ``NPU_GLUE_SITES`` switches it: ``count`` (the default),
``log`` (count, and log each site's first fallback with its reason on the ``npu_glue`` logger, one
line per site: what a user profiling on an NPU reads to see why a kernel did not run) or ``off``.

Sections: value checks, what ran per site, attention, rotary embedding, RMSNorm, SwiGLU, MoE
gating. Imports only torch, torch_npu, math, functools, logging, os and sys.
"""

import logging
import math
import os
import sys
from functools import lru_cache, reduce

import torch
import torch_npu

#: Largest head dim and head count npu_fusion_attention takes.
MAX_HEAD_DIM = 768
MAX_HEADS = 256
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)

#: In a package, migrated files import this module as ``from .npu_glue import npu_glue``: a relative
#: import in the form Hugging Face transformers' remote-code loader finds (``save_pretrained``
#: copies the files a modeling file imports that way, so ``trust_remote_code`` models keep working).
npu_glue = sys.modules[__name__]


# -- value checks, on every call --------------------------------------------------------------------


def _compiling():
    return torch.compiler.is_compiling()


def _failed(tensors, conditions):
    """The first condition (reason -> a function giving a 0-d bool tensor over ``tensors``' values)
    that does not hold, or None when all do, read back with one device->host sync for all of them.
    Evaluated on every call, never remembered: no key says that a tensor's values are still those a
    verdict was made on (see "Derived state" above). Pass only the unproven conditions; under
    torch.compile, or on meta tensors, an unproven condition counts as not holding."""
    if not conditions:
        return None
    if _compiling():
        return "a value condition is not checked under torch.compile: " + next(iter(conditions))
    if any(t.is_meta for t in tensors):
        return "a value condition cannot be checked on meta tensors: " + next(iter(conditions))
    reasons = list(conditions)
    with torch.no_grad():
        first = -1  # the index of the first condition that fails, on the device until the one sync
        for index in reversed(range(len(reasons))):
            first = torch.where(conditions[reasons[index]](), first, index)
        first = int(first)
    return None if first < 0 else reasons[first]


# -- what ran, per site ---------------------------------------------------------------------------

#: ``NPU_GLUE_SITES``: "count" (default), "log" (count and log each site's first fallback) or "off"
SITES = os.environ.get("NPU_GLUE_SITES", "count").strip().lower()
_log = logging.getLogger("npu_glue")
_calls = {}  # site -> [calls, calls that ran the fused kernel]
_fallbacks = {}  # site -> {first failed precondition: calls}


def _record(site, why, *, when=True, final=True):
    """Count one call of ``site``: fused when ``why`` is None and ``when`` holds (the site's own
    flags, written by the rule), else fallen back because of ``why`` (the first precondition that
    failed); returns whether the fused path runs. ``final=False``: a check before the one that
    decides (a pass counts nothing: the deciding check counts the call). Python counters only,
    skipped under torch.compile and when NPU_GLUE_SITES is "off"."""
    if why is None and not when:
        why = "a condition of the site's own code does not hold (the `when` of its guard)"
    if site is None or SITES == "off" or _compiling() or why is None and not final:
        return why is None
    counts = _calls.setdefault(site, [0, 0])
    counts[0] += 1
    if why is None:
        counts[1] += 1
        return True
    reasons = _fallbacks.setdefault(site, {})
    if not reasons and SITES == "log":
        _log.warning("npu_glue: %s: the original code runs: %s", site, why)
    reasons[why] = reasons.get(why, 0) + 1
    return False


def site_counts():
    """``{site: {"calls": m, "fused": n, "fallbacks": {reason: calls}}}`` since the last reset."""
    return {site: {"calls": calls, "fused": fused, "fallbacks": dict(_fallbacks.get(site, {}))}
            for site, (calls, fused) in _calls.items()}


def reset_site_counts():
    _calls.clear()
    _fallbacks.clear()


# -- attention ----------------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def _causal_mask(device):
    return torch.triu(torch.ones(2048, 2048, dtype=torch.bool, device=device), diagonal=1)


def causal_mask(device):
    """The compressed 2048x2048 mask that sparse_mode 2/3 take (True = masked), built once per device
    (in the graph under torch.compile)."""
    return (_causal_mask.__wrapped__ if _compiling() else _causal_mask)(device)


def _autocast_dtype(t):
    """The dtype autocast runs matmuls in on ``t``'s device (float16 or bfloat16), or None outside
    autocast. On an NPU torch_npu's autocast (``torch.autocast("npu")``) casts the inputs of
    matmul, bmm and baddbmm to it as CUDA's does."""
    kind = t.device.type
    try:
        dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None
    except RuntimeError:  # a device type without autocast
        return None
    return dtype if dtype in (torch.float16, torch.bfloat16) else None


def _shapes_why(query, key, value, enable_gqa=True, cast_value=False):
    """Why q/k/v are not [B, N, S, D] tensors of one float dtype npu_fusion_attention accepts, or None
    (``cast_value``: the call casts v to q's dtype and the result back to v's, so v may have another
    float dtype). With fewer K/V heads (GQA) they go to the kernel as they are: head_num is the
    query's, K/V heads divide it."""
    if not all(torch.is_tensor(t) for t in (query, key, value)):
        return "q, k and v are not all tensors"
    if not query.dim() == key.dim() == value.dim() == 4:
        return f"q, k, v of {query.dim()}, {key.dim()}, {value.dim()} dims, not 4 ([B, N, S, D])"
    amp = _autocast_dtype(query)
    if amp is not None:  # the original's matmuls run in autocast's dtype whatever q, k, v hold
        if not all(t.dtype in _FLOATS for t in (query, key, value)):
            return f"q, k, v dtypes {_names(query, key, value)} under autocast"
        if cast_value and value.dtype != amp:
            return "v is cast to q's dtype and the result back under autocast"
    elif query.dtype not in _FLOATS or key.dtype != query.dtype or \
            value.dtype != query.dtype and not (cast_value and value.dtype in _FLOATS):
        return f"q, k, v dtypes {_names(query, key, value)}"
    (b, nq, _, d), (bk, nk, sk, dk), (bv, nv, sv, dv) = query.shape, key.shape, value.shape
    heads_ok = nq == nk if not enable_gqa else nk >= 1 and nq % nk == 0
    if not (b == bk == bv and heads_ok and nk == nv and sk == sv):
        return f"q, k, v shapes {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)} do not pair up"
    if nq > MAX_HEADS or not 1 <= d == dk <= MAX_HEAD_DIM or dv > dk:
        return f"{nq} heads of head dim {d} (v: {dv}): over the kernel's {MAX_HEADS} heads / {MAX_HEAD_DIM} dims"
    if not query.device == key.device == value.device:
        return "q, k, v on different devices"
    return None


def _names(*tensors):
    return ", ".join(str(t.dtype).removeprefix("torch.") for t in tensors)


def _broadcasts(mask, query, key):
    """``mask`` broadcasts to the [B, N, Sq, Skv] scores without growing them."""
    scores = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    return mask.dim() <= 4 and all(m in (1, s) for m, s in zip(mask.shape[::-1], scores[::-1]))


def _fit(masked, query, key):
    """``masked`` expanded (a view) to a shape npu_fusion_attention takes: [B, 1 or N, Sq, Skv]."""
    while masked.dim() < 4:
        masked = masked.unsqueeze(0)
    b, n, sq, skv = query.shape[0], query.shape[1], query.shape[2], key.shape[2]
    return masked.expand(b, n if masked.shape[1] != 1 else 1, sq, skv)


def _masks(query, key, additive, masked, keep, causal=None):
    """(the (kind, mask) pairs given, None), or (None, why) when one is not a tensor of the right dtype
    and shape."""
    given = (("additive", additive), ("masked", masked), ("keep", keep), ("causal", causal))
    masks = [(kind, m) for kind, m in given if m is not None]
    for kind, m in masks:
        if not torch.is_tensor(m):
            return None, f"the {kind} mask is not a tensor"
        if not _broadcasts(m, query, key):
            return None, f"the {kind} mask's shape {tuple(m.shape)} does not broadcast to the scores"
        if kind == "additive" and not m.is_floating_point() or kind in ("masked", "keep") and m.dtype != torch.bool:
            return None, f"the {kind} mask has dtype {_names(m)}"
        if kind == "causal" and (m.is_complex() or tuple(m.shape[-2:]) != (query.shape[2], key.shape[2])):
            return None, "the causal slice does not cover the scores"
    return masks, None


def _term(kind, mask):
    """One mask as a bool tensor, True = masked out. Additive "minus infinity": -inf or about dtype min;
    a causal buffer's slice: its zeros (``masked_fill(buf == 0, -inf)``, ``where(buf.bool(), w, -inf)``)."""
    if kind == "additive":
        return mask <= torch.finfo(mask.dtype).min / 2
    if kind == "causal":
        return mask == 0
    return mask if kind == "masked" else ~mask


def _combined(masks):
    """The masks as one bool tensor (True = masked out, not yet expanded), converted from their values
    on every call: elementwise on the device, no sync, never stale; a bool ``masked`` mask alone is
    passed as it is."""
    return reduce(torch.logical_or, [_term(kind, m) for kind, m in masks])


def _mask_values_why(masks, values_proven, rows_proven):
    """Why not (or None): an additive mask holds only 0 and minus infinity (the values that convert
    exactly), and no query row masks out every key (eager softmax makes such a row NaN or uniform;
    the kernel does not)."""
    additive = [m for kind, m in masks if kind == "additive"]
    conditions = {}
    if additive and not values_proven:
        conditions["the additive mask holds values other than 0 and minus infinity"] = lambda: reduce(
            torch.logical_and, [((m == 0) | _combined([("additive", m)])).all() for m in additive])
    if not rows_proven:
        conditions["a query row masks every key (padding)"] = lambda: ~_combined(masks).all(dim=-1).any()
    return _failed([m for _, m in masks], conditions)


def is_scalar(value):
    """A scale the kernel takes (a float): a Python number or a tensor of one element and no dims."""
    if torch.is_tensor(value):
        return value.dim() == 0 and value.is_floating_point()
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def can_fuse(query, key, value, *, additive=None, masked=None, keep=None, causal=None,
             mask_values_proven=False, live_rows_proven=False, cast_value=False, scale=1.0, weights_requested=False,
             when=True, site=None):
    """True when npu_fusion_attention computes what the eager attention code does.

    ``additive``: a float mask added to the scores (only 0 and values <= dtype min / 2 convert);
    ``masked``: a bool mask, True = masked out (``masked_fill(cond, -inf)``); ``keep``: a bool mask,
    True = attend (``torch.where(keep, w, min)``); ``causal``: the slice of a causal buffer the code
    applies (zero = masked out), covering the whole [Sq, Skv] score matrix. The kernel gets every
    mask's current values (``npu_mask``): a buffer proven lower-triangular where it is built may
    have been filled, loaded or written through ``.data`` since, so it is never taken for the
    kernel's own causal mode. A row with every key masked makes the eager softmax NaN or uniform,
    which the kernel does not reproduce: those fall back.

    Proofs a rule may pass when it sees how the masks are built in the same call (they skip the value
    checks; a proof about a stored tensor, such as a buffer, does not hold: its values can change):
    ``mask_values_proven=True`` when the additive mask holds only 0 and -inf / dtype min by
    construction: ``torch.full(..., -inf)`` then ``torch.triu``/``tril``, ``masked_fill(cond,
    -inf or finfo.min)`` of zeros, or a Hugging Face masking utility (``create_causal_mask`` and
    friends, eager output); ``live_rows_proven=True`` when no query row can be masked entirely: a
    ``torch.tril``/``triu(diagonal=1)`` causal mask with Sq <= Skv and no padding term. A padding
    mask never proves live rows (left padding masks whole rows). ``cast_value``: the fused call runs
    in q's dtype and casts the result to v's. ``scale``: the code's scale when it is not a Python
    number (the kernel takes a float: ``is_scalar``); ``weights_requested``: the attention
    probabilities are read afterwards (the kernel does not form them). ``site``: counted there
    (see "What ran, per site").
    """
    return _record(site, _can_fuse_why(query, key, value, additive, masked, keep, causal, mask_values_proven,
                                       live_rows_proven, cast_value, scale, weights_requested), when=when)


def _can_fuse_why(query, key, value, additive, masked, keep, causal, values_proven, rows_proven, cast_value, scale,
                  weights_requested):
    if weights_requested:
        return "the attention probabilities are requested (output_attentions)"
    if not is_scalar(scale):
        return "the scale is not a float or a 0-d float tensor"
    why = _shapes_why(query, key, value, cast_value=cast_value)
    if why is not None:
        return why
    masks, why = _masks(query, key, additive, masked, keep, causal)
    if why is not None or not masks:
        return why
    return _mask_values_why(masks, values_proven, rows_proven or _dead_rows_fixable(masks, query, key, value))


def _dead_rows_fixable(masks, query, key, value):
    """Whether ``fusion_attention`` gives a query row with every key masked what the original gives
    it, on the device: one additive mask (values 0 and <= dtype min / 2, checked apart), scores not
    float16, no gradient needed. The original adds the mask to the scores: in float32 or bfloat16 a
    score vanishes against a mask value near -3.4e38 (it is below half its spacing, about 1e31), so
    the row's softmax is uniform over the keys whose mask value is the row's largest, or NaN when
    that is -inf; in float16 (min -65504) the scores still count, and such rows fall back. The
    kernel's backward for such rows is not the original's (its gradient flows through the scores):
    with a gradient needed they fall back too."""
    if len(masks) != 1 or masks[0][0] != "additive":
        return False
    compute = _autocast_dtype(query) or query.dtype
    if torch.promote_types(compute, masks[0][1].dtype) == torch.float16:
        return False
    return _no_grad_needed(query, key, value, masks[0][1])


def fusion_attention(query, key, value, head_num, *, scale=1.0, keep_prob=1.0, additive=None, masked=None, keep=None,
                     causal=None, live_rows_proven=False, **proofs):
    """``torch_npu.npu_fusion_attention(query, key, value, head_num, "BNSD", ...)[0]`` for inputs
    ``can_fuse`` accepted, computing what the original eager attention computes:

    - under autocast, q, k and v are cast to autocast's dtype, as the original's matmuls cast them
      (the result is in that dtype, as the original's ``probs @ v``);
    - the masks go to the kernel converted from their current values (``npu_mask``);
    - a query row with every key masked (left padding) gets the original's value on the device,
      with no sync (``_dead_rows_fixable``): its query is zeroed and its mask opens the keys whose
      mask value is the row's largest, so the kernel's softmax is the uniform one the original's
      is; rows whose largest value is -inf become NaN, as the original's softmax makes them.
    """
    amp = _autocast_dtype(query)
    if amp is not None:
        query, key, value = (t if t.dtype == amp else t.to(amp) for t in (query, key, value))
    masks, _ = _masks(query, key, additive, masked, keep, causal)
    atten_mask, nan_rows = (_combined(masks) if masks else None), None
    if masks and not live_rows_proven and _dead_rows_fixable(masks, query, key, value):
        mask = masks[0][1]
        dead = atten_mask.all(dim=-1, keepdim=True)
        top = mask.amax(dim=-1, keepdim=True)
        atten_mask = torch.where(dead, mask != top, atten_mask)
        query = torch.where(dead, torch.zeros((), dtype=query.dtype, device=query.device), query)
        nan_rows = dead & (top == float("-inf"))
    out = torch_npu.npu_fusion_attention(
        query, key, value, head_num, "BNSD", atten_mask=None if atten_mask is None else _fit(atten_mask, query, key),
        scale=scale, keep_prob=keep_prob)[0]
    return out if nan_rows is None else torch.where(nan_rows, torch.full((), float("nan"), dtype=out.dtype, device=out.device), out)


def npu_mask(query, key, *, additive=None, masked=None, keep=None, causal=None, **proofs):
    """The NPU ``atten_mask`` (bool, True = masked out) for masks ``can_fuse`` accepted, converted from
    their current values (``proofs``: the flags passed to can_fuse, accepted for symmetry)."""
    masks, _ = _masks(query, key, additive, masked, keep, causal)
    return _fit(_combined(masks), query, key) if masks else None


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


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False,
         mask_values_proven=False, live_rows_proven=False, site=None):
    """``torch.nn.functional.scaled_dot_product_attention`` on the fused NPU kernel when it is exact.

    Differences handled here: the NPU mask is True = masked out (an SDPA bool mask is True =
    attend); SDPA's ``is_causal`` is aligned top-left, which is sparse_mode 2 with the compressed
    mask; the NPU scale defaults to 1.0, SDPA's to 1/sqrt(D); rows with every key masked give 0 in
    SDPA, which needs ``inner_precise=2`` (a float mask's -inf rows give 0 too, but its dtype-min
    rows a uniform average: float masks with dead rows are not converted). The proofs are
    ``can_fuse``'s; ``site``: counted there. Anything else runs the original SDPA.
    """
    keep = torch.is_tensor(attn_mask) and attn_mask.dtype == torch.bool
    why = _sdpa_why(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa, keep, mask_values_proven,
                    live_rows_proven)
    if not _record(site, why):
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
            enable_gqa=enable_gqa)
    masks, _ = _masks(query, key, None if keep else attn_mask, None, attn_mask if keep else None)
    atten_mask = _fit(_combined(masks), query, key) if masks else causal_mask(query.device) if is_causal else None
    amp = _autocast_dtype(query)  # SDPA is on autocast's lower-precision list: it casts q, k, v so
    if amp is not None:
        query, key, value = (t if t.dtype == amp else t.to(amp) for t in (query, key, value))
    return torch_npu.npu_fusion_attention(
        query, key, value, query.shape[1], "BNSD", atten_mask=atten_mask,
        scale=1 / math.sqrt(query.shape[-1]) if scale is None else scale,
        keep_prob=1.0 - dropout_p, sparse_mode=2 if is_causal else 0, inner_precise=2 if keep else 0)[0]


def _sdpa_why(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa, keep, values_proven, rows_proven):
    why = _shapes_why(query, key, value, enable_gqa)
    if why is not None:
        return why
    if attn_mask is not None and is_causal:
        return "both attn_mask and is_causal"
    if not 0.0 <= dropout_p < 1.0:
        return f"dropout_p {dropout_p} outside [0, 1)"
    if attn_mask is None:
        return None
    masks, why = _masks(query, key, None if keep else attn_mask, None, attn_mask if keep else None)
    if why is not None or keep:
        return why
    return _mask_values_why(masks, values_proven, rows_proven)


# -- rotary position embedding ----------------------------------------------------------------------

#: npu_rotary_mul limits: D even and below ROTARY_MAX_HEAD_DIM; B and N (half) or B*N (interleave) below
#: ROTARY_MAX_BATCH_HEADS; B*N at most ROTARY_MAX_GRAD_BATCH_HEADS when cos/sin need gradients.
ROTARY_MAX_HEAD_DIM = 896
ROTARY_MAX_BATCH_HEADS = 1000
ROTARY_MAX_GRAD_BATCH_HEADS = 1024


def _folds(x, cos, mode):
    """Per-batch cos/sin in interleave mode, [B, S, 1, D] for a BSND x, are taken by the kernel once
    batch and sequence are merged into one sequence of B*S positions."""
    b, s, _, d = x.shape
    return mode == "interleave" and b > 1 and s > 1 and tuple(cos.shape) == (b, s, 1, d)


def _fold(t):
    return t.reshape(1, -1, *t.shape[2:])


def _layouts(shape, mode):
    """(batch, heads, cos/sin shapes) for each layout a 4-D x of ``shape`` may have."""
    d0, d1, d2, d = shape
    layouts = (
        (d0, d1, [(1, 1, d2, d), (d0, 1, d2, d)]),  # BNSD: 11SD, B1SD
        (d0, d2, [(1, d1, 1, d), (d0, d1, 1, d)]),  # BSND: 1S1D, BS1D
        (d1, d2, [(d0, 1, 1, d), (d0, d1, 1, d)]),  # SBND: S11D, SB1D
    )
    if mode == "interleave":
        return [(b, n, shapes[:1]) for b, n, shapes in layouts]
    return [(b, n, shapes + [tuple(shape)]) for b, n, shapes in layouts]


def _limits_hold(batch, heads, mode, grads):
    if grads and batch * heads > ROTARY_MAX_GRAD_BATCH_HEADS:
        return False
    if mode == "interleave":
        return batch * heads < ROTARY_MAX_BATCH_HEADS
    return batch < ROTARY_MAX_BATCH_HEADS and heads < ROTARY_MAX_BATCH_HEADS


def _table(t):
    """A 2-D or 3-D cos/sin table as the 4-D table it broadcasts as against a 4-D x (leading 1s:
    ``x * cos`` broadcasts so, and the kernel takes 11SD, 1S1D, S11D, ... tables)."""
    while t.dim() < 4:
        t = t.unsqueeze(0)
    return t


def rotary_fits(x, cos, sin, mode="half", *, when=True, site=None):
    """True when ``rotary_mul(x, cos, sin, mode)`` computes ``x * cos + rotate(x) * sin`` as the
    original code does: same result shape and dtype (float dtypes may differ: the call computes in
    their promotion, as the original's products do), no broadcasting the kernel lacks. Shapes,
    dtypes and devices only: the kernel computes ``x * r1 + rotate(x) * r2`` for any table values
    (torch_npu's npu_rotary_mul documentation states no range), so nothing about the tables'
    contents is checked, or remembered (scaled tables such as YaRN's fuse too). 2-D and 3-D
    tables count as the 4-D tables they broadcast as. ``site``: counted there."""
    return _record(site, _rotary_why(x, cos, sin, mode), when=when)


def _rotary_why(x, cos, sin, mode):
    if not all(torch.is_tensor(t) for t in (x, cos, sin)):
        return "x, cos and sin are not all tensors"
    if 2 <= cos.dim() < 4 and cos.shape == sin.shape:
        cos, sin = _table(cos), _table(sin)
    if x.dim() != 4 or cos.dim() != 4 or cos.shape != sin.shape or x.numel() == 0:
        return f"x {tuple(x.shape)} with tables {tuple(cos.shape)}, {tuple(sin.shape)}: not 4-D tables of one shape"
    if not all(t.dtype in _FLOATS for t in (x, cos, sin)):
        return f"x, cos, sin dtypes {_names(x, cos, sin)}"
    if not x.device == cos.device == sin.device:
        return "x, cos, sin on different devices"
    d = x.shape[-1]
    if d % 2 or d >= ROTARY_MAX_HEAD_DIM:
        return f"head dim {d}: odd or not below {ROTARY_MAX_HEAD_DIM}"
    if _folds(x, cos, mode):
        x, cos = _fold(x), _fold(cos)
    grads = torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad)
    layouts = [(b, n) for b, n, shapes in _layouts(x.shape, mode) if tuple(cos.shape) in shapes]
    if not layouts and _widens(x, cos, mode):
        layouts = [(b, n) for b, n, shapes in _layouts(x.shape, mode) if tuple(x.shape) in shapes]
    if not layouts:
        return f"tables {tuple(cos.shape)} fit no layout of x {tuple(x.shape)} ({mode} mode)"
    if not all(_limits_hold(b, n, mode, grads) for b, n in layouts):
        return "batch or heads over the kernel's limits"
    return None


def _widens(x, cos, mode):
    """Half-mode tables that broadcast to x without growing it but fit none of the kernel's table
    layouts (per-head tables [1, N, S, D], ...): the kernel takes them expanded to x's shape."""
    return mode == "half" and cos.dim() == x.dim() and all(c in (1, n) for c, n in zip(cos.shape, x.shape))


def rotary_mul(x, cos, sin, mode="half"):
    """``torch_npu.npu_rotary_mul`` for inputs ``rotary_fits`` accepted, in the dtype the original's
    elementwise products promote to (a bfloat16 x under autocast with float32 tables, as Llama's are:
    float32; ``*`` and ``+`` are on no autocast list, so type promotion decides): x and the tables
    are cast to it (exact: a widening cast), so the kernel computes in the original's precision."""
    dtype = torch.promote_types(torch.promote_types(x.dtype, cos.dtype), sin.dtype)
    x, cos, sin = (t if t.dtype == dtype else t.to(dtype) for t in (x, cos, sin))
    cos, sin = _table(cos), _table(sin)
    if _folds(x, cos, mode):
        return torch_npu.npu_rotary_mul(_fold(x), _fold(cos), _fold(sin), mode).reshape(x.shape)
    if not any(tuple(cos.shape) in shapes for _, _, shapes in _layouts(x.shape, mode)):  # rotary_fits: _widens
        cos, sin = cos.expand(x.shape).contiguous(), sin.expand(x.shape).contiguous()
    return torch_npu.npu_rotary_mul(x, cos, sin, mode)


# Pair tables: code that keeps one cos and one sin per rotated pair, D/2 wide (torchtune's packed
# cache, ChatGLM, Meta/Mistral's complex freqs_cis), rather than one per channel as npu_rotary_mul
# takes them. The per-channel tables are derived from the pair tables' current values on every call
# (a copy of the tables, S x D, not of the activations): a table kept from an earlier call could be
# stale, since a buffer changes through ``.data`` or ``load_state_dict`` without a new identity.


def _widen(cos, sin, mode, dtype):
    """Per-channel (cos, sin) from pair tables: 'interleave' repeats each pair's value in place
    ([c0, c0, c1, c1, ...]), 'half' repeats the table ([c0, c1, ..., c0, c1, ...])."""
    def wide(t):
        t = t.to(dtype)
        return t.repeat_interleave(2, dim=-1) if mode == "interleave" else torch.cat((t, t), dim=-1)

    return wide(cos), wide(sin)


def _pair_layout(x, cos, sin, mode, paired):
    """(x as [.., D] of 4 dims, per-channel tables shape of 4 dims, result dtype), or None when the
    shapes or dtypes are not a pair rotation npu_rotary_mul can compute."""
    if not all(torch.is_tensor(t) for t in (x, cos, sin)) or cos.shape != sin.shape:
        return None
    if x.is_complex() or cos.is_complex() or sin.is_complex() or not x.device == cos.device == sin.device:
        return None
    dtype = torch.promote_types(torch.promote_types(x.dtype, cos.dtype), sin.dtype)
    if dtype not in _FLOATS or (paired and (x.dim() < 2 or x.shape[-1] != 2)):
        return None
    shape = (*x.shape[:-2], 2 * x.shape[-2]) if paired else tuple(x.shape)
    if len(shape) < 3 or math.prod(shape) == 0 or shape[-1] % 2 or shape[-1] >= ROTARY_MAX_HEAD_DIM:
        return None
    pairs = (*shape[:-1], shape[-1] // 2)  # one angle per pair: the tables broadcast to this, never beyond it
    if cos.dim() > len(pairs) or cos.shape[-1] != pairs[-1] or any(
            c not in (1, p) for c, p in zip(cos.shape[::-1], pairs[::-1])):
        return None
    x_shape = (1,) * (4 - len(shape)) + shape
    table_shape = (1,) * (len(x_shape) - cos.dim()) + (*cos.shape[:-1], shape[-1])
    while len(x_shape) > 4:  # leading dims the tables repeat over (or share with x) merge into one
        (a, b, *x_rest), (ta, tb, *t_rest) = x_shape, table_shape
        if (ta, tb) not in ((1, 1), (a, b)):
            return None
        x_shape, table_shape = (a * b, *x_rest), (ta * tb, *t_rest)
    return x_shape, table_shape, dtype


def pair_rotary_fits(x, cos, sin, mode="interleave", *, paired=False, split=False, when=True, site=None):
    """True when ``pair_rotary_mul`` computes the pair rotation the original code writes out:
    ``mode`` 'interleave' rotates channels (2i, 2i+1), 'half' channels (i, i + D/2), each pair by
    ``cos[..., i]`` and ``sin[..., i]`` (tables D/2 wide, broadcasting to x without growing it):
    ``(a, b) -> (a * cos - b * sin, b * cos + a * sin)``. ``paired``: x is [..., D/2, 2] (channel
    pairs on the last dim, the result too). ``split`` ('interleave' only): the result holds the
    rotated even channels, then the rotated odd ones (DeepSeek's
    ``cat([x0 * cos - x1 * sin, x1 * cos + x0 * sin], -1)``). x has 3 or more dims as [..., D]; the
    result has the dtype the original's products promote to. Leading dims beyond 4 merge into one
    where the tables repeat over them (torchtune's tiled vision rotary: [b, tiles, s, n, D]).
    ``site``: counted there."""
    return _record(site, _pair_rotary_why(x, cos, sin, mode, paired, split), when=when)


def _pair_rotary_why(x, cos, sin, mode, paired, split):
    if split and (mode != "interleave" or paired):
        return "a split rotation in half mode or of paired channels"
    mode = "half" if split else mode  # the even/odd channels put side by side turn as halves
    layout = _pair_layout(x, cos, sin, mode, paired)
    if layout is None:
        return "x and the pair tables are not a pair rotation the kernel computes (shape, dtype or device)"
    (b0, b1, b2, d), table, dtype = layout
    x_shape = (b0, b1, b2, d)
    if mode == "interleave" and b0 > 1 and b1 > 1 and table == (b0, b1, 1, d):  # per-batch BS1D: fold B into S
        x_shape, table = (1, b0 * b1, b2, d), (1, b0 * b1, 1, d)
    grads = torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad)
    layouts = [(b, n) for b, n, shapes in _layouts(x_shape, mode) if table in shapes]
    if not layouts:
        return f"tables {table} fit no layout of x {x_shape} ({mode} mode)"
    if not all(_limits_hold(b, n, mode, grads) for b, n in layouts):
        return "batch or heads over the kernel's limits"
    return None


def pair_rotary_mul(x, cos, sin, mode="interleave", *, paired=False, split=False):
    """``npu_rotary_mul`` for inputs ``pair_rotary_fits`` accepted, shaped and typed as the original's result."""
    if split:  # one copy: the even channels, then the odd ones, rotated as halves
        x, mode = torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1), "half"
    x_shape, table_shape, dtype = _pair_layout(x, cos, sin, mode, paired)
    wide_cos, wide_sin = _widen(cos, sin, mode, dtype)
    full = x.to(dtype).reshape(x_shape)
    out = rotary_mul(full, wide_cos.reshape(table_shape), wide_sin.reshape(table_shape), mode)
    return out.reshape(x.shape)


def rotary_fits_cast(x, dtype, cos, sin, mode="half", *, when=True, site=None):
    """``rotary_fits`` for x cast to ``dtype`` (code that rotates ``x.float()``), without making the
    cast: only x's shape and device are read."""
    if not torch.is_tensor(x) or not isinstance(dtype, torch.dtype):
        return _record(site, "x is not a tensor or the cast not to a dtype")
    return rotary_fits(torch.empty((), dtype=dtype, device=x.device).expand(x.shape), cos, sin, mode, when=when,
                       site=site)


def complex_rotary_fits(x, freqs_cis, *, when=True, site=None):
    """True when ``complex_rotary_mul(x, freqs_cis)`` computes ``torch.view_as_real(x * freqs_cis)``:
    x (channel pairs as complex numbers, [..., D/2]) and freqs_cis (unit complex numbers,
    ``torch.polar(ones, angles)``) complex64, freqs_cis broadcasting to x without growing it."""
    if not (torch.is_tensor(x) and torch.is_tensor(freqs_cis) and x.dtype == freqs_cis.dtype == torch.complex64):
        return _record(site, "x and freqs_cis are not both complex64 tensors")
    return pair_rotary_fits(torch.view_as_real(x), freqs_cis.real, freqs_cis.imag, "interleave", paired=True,
                            when=when, site=site)


def complex_rotary_mul(x, freqs_cis):
    """``torch.view_as_real(x * freqs_cis)`` on npu_rotary_mul ('interleave' mode: the complex
    product rotates each pair of channels), for inputs ``complex_rotary_fits`` accepted."""
    return pair_rotary_mul(torch.view_as_real(x), freqs_cis.real, freqs_cis.imag, "interleave", paired=True)


# -- RMSNorm, SwiGLU, MoE gating --------------------------------------------------------------------

#: F.rms_norm's eps when none is given for float16/bfloat16/float32 x: the epsilon of its op math type,
#: float32 (not x's dtype).
FLOAT32_EPS = torch.finfo(torch.float32).eps
_NO_WEIGHT = object()


def _no_grad_needed(*tensors):
    """Kernels without a backward on a real NPU may run only where nothing needs a gradient."""
    return not torch.is_grad_enabled() or not any(t.requires_grad for t in tensors if t is not None)


def rms_norm_fits(x, weight=_NO_WEIGHT, normalized_shape=None, min_dim=2, *, mixed_dtype=False, when=True,
                  site=None):
    """``npu_rms_norm(x, weight)`` normalises what the original normalises: x is a float tensor of 2 to
    8 dims; weight (left out when the code has none) covers exactly the normalised trailing dims (the
    last one, unless ``normalized_shape`` says more) and has x's dtype, or, with ``mixed_dtype=True``,
    is float32 for a float16/bfloat16 x (the kernel's mixed precision, as under autocast: the site
    must then use ``rms_norm`` below, which returns the original's dtype). ``site``: counted there."""
    return _record(site, _rms_norm_why(x, weight, normalized_shape, min_dim, mixed_dtype), when=when)


def _rms_norm_why(x, weight, normalized_shape, min_dim, mixed_dtype):
    if not torch.is_tensor(x) or x.dtype not in _FLOATS:
        return "x is not a float16/bfloat16/float32 tensor"
    if not min_dim <= x.dim() <= 8:
        return f"x has {x.dim()} dims, not {min_dim} to 8"
    if normalized_shape is not None:
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if not shape or tuple(x.shape[x.dim() - len(shape):]) != shape:
            return f"x {tuple(x.shape)} does not end in the normalised shape {shape}"
    else:
        shape = tuple(x.shape[-1:])
    if weight is _NO_WEIGHT:
        return None
    if not torch.is_tensor(weight) or tuple(weight.shape) != shape:
        return f"the weight is not a tensor of shape {shape}"
    mixed = mixed_dtype and x.dtype in (torch.float16, torch.bfloat16) and weight.dtype == torch.float32
    return None if weight.dtype == x.dtype or mixed else f"x, weight dtypes {_names(x, weight)}"


def rms_norm(x, weight, epsilon=1e-06, *, dtype=None):
    """``npu_rms_norm(x, weight, epsilon)[0]`` in the dtype the original code returns: ``dtype``, by
    default the promotion of x's and weight's (``weight * normed.to(x.dtype)``, as Llama's RMSNorm
    does: float32 for a bfloat16 x and a float32 weight). Pass ``dtype=x.dtype`` for norms that
    cast back to the input's dtype (``.type_as(x)``)."""
    out = torch_npu.npu_rms_norm(x, weight, epsilon=epsilon)[0]
    dtype = torch.promote_types(x.dtype, weight.dtype) if dtype is None else dtype
    return out if out.dtype == dtype else out.to(dtype)


def rms_norm_eps(eps):
    """The epsilon ``F.rms_norm(x, ..., eps)`` uses: eps, or for None the epsilon of its op math type,
    which is float32 for float16, bfloat16 and float32 x (torch 2.13: ``torch.finfo(x.dtype).eps`` in
    its documentation, but its kernels and decomposition compute in float32 and take float32's)."""
    return FLOAT32_EPS if eps is None else eps


class RMSNorm(torch.nn.RMSNorm):
    """``torch.nn.RMSNorm`` whose forward runs ``npu_rms_norm`` where that computes what
    ``F.rms_norm`` does (same parameters, state dict and result dtype; otherwise the original
    forward). Migrated code constructs it as ``RMSNorm.at(site=...)(...)`` and subclasses
    ``RMSNorm.base(site=...)`` in place of ``torch.nn.RMSNorm``, so that each forward is counted
    at the site that made it (a plain attribute, not in the state dict)."""

    site = None

    @classmethod
    def at(cls, site=None):
        """A constructor of this class whose modules count their forwards at ``site``."""
        def construct(*args, **kwargs):
            module = cls(*args, **kwargs)
            module.site = site
            return module
        return construct

    @classmethod
    def base(cls, site=None):
        """This class as a base whose subclasses count their forwards at ``site`` (one class per
        site; the subclass itself is what instances and pickles name)."""
        return _sited_rms_norm(cls, site)

    def forward(self, x):
        weight = _NO_WEIGHT if self.weight is None else self.weight
        if rms_norm_fits(x, weight, normalized_shape=self.normalized_shape, mixed_dtype=True, site=self.site):
            gamma = x.new_ones(self.normalized_shape) if self.weight is None else self.weight
            return rms_norm(x, gamma, rms_norm_eps(self.eps), dtype=x.dtype)
        return super().forward(x)


@lru_cache(maxsize=None)
def _sited_rms_norm(cls, site):
    return type(cls.__name__, (cls,), {"site": site, "__module__": cls.__module__, "__qualname__": cls.__qualname__})


def gemma_rms_norm_fits(x, weight, *, when=True, site=None):
    """``npu_gemma_rms_norm`` has no backward on a real NPU: inference only, else as above."""
    why = _rms_norm_why(x, weight, None, 1, False)
    if why is None and not _no_grad_needed(x, weight):
        why = "a gradient is needed (npu_gemma_rms_norm has no backward)"
    if why is None and not x.is_contiguous():
        why = "x is not contiguous"
    return _record(site, why, when=when)


def add_rms_norm_fits(x1, x2, norm, kind, weight, *, when=True, site=None):
    """``npu_add_rms_norm(x1, x2, weight, eps)`` computes what ``norm(x1 + x2)`` does, and the sum:
    ``norm`` is exactly a ``kind`` module (the class whose forward the rule read as an RMSNorm) and
    calling it runs that forward (no hooks, no forward of the instance's own); x1 and x2 are float
    tensors of one shape (no broadcasting), 1 to 8 dims; the weight covers the last dim and has the
    dtype of the sum; no gradient is needed (the kernel has no backward on a real NPU)."""
    return _record(site, _add_rms_norm_why(x1, x2, norm, kind, weight), when=when)


def _add_rms_norm_why(x1, x2, norm, kind, weight):
    if type(norm) is not kind:
        return f"the norm is a {type(norm).__name__}, not the {kind.__name__} that was read"
    if _hooked(norm):
        return "calling the norm runs hooks or a forward of the instance's own"
    if not (torch.is_tensor(x1) and torch.is_tensor(x2)) or x1.dtype not in _FLOATS or x2.dtype not in _FLOATS:
        return "x1 and x2 are not float16/bfloat16/float32 tensors"
    if x1.shape != x2.shape:
        return f"x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} differ in shape (a broadcasting add)"
    summed = x1 if x1.dtype == torch.promote_types(x1.dtype, x2.dtype) else x2
    why = _rms_norm_why(summed, weight, None, 1, False)
    if why is None and not _no_grad_needed(x1, x2, weight):
        why = "a gradient is needed (npu_add_rms_norm has no backward)"
    return why


#: A hook function with this attribute set only observes calls (``migrate parity``'s recorder): a
#: fast path that computes a module's result without calling it may leave it uncalled.
OBSERVER = "npu_glue_observer"


def _hooked(module):
    """Whether calling ``module`` runs more than its class's forward: a hook that is not an
    observer's (``OBSERVER``), torch's global module hooks included, or a forward of its own."""
    shared = torch.nn.modules.module
    hooks = (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks, module._backward_pre_hooks,
             shared._global_forward_hooks, shared._global_forward_pre_hooks, shared._global_backward_hooks,
             shared._global_backward_pre_hooks)
    return any(not getattr(hook, OBSERVER, False) for found in hooks for hook in found.values()) \
        or "forward" in module.__dict__


def add_rms_norm(x1, x2, weight, epsilon=1e-06):
    """``(norm(x1 + x2), x1 + x2)`` by one ``npu_add_rms_norm`` call, in the dtype of the sum (the
    inputs are brought to it first, as ``x1 + x2`` does)."""
    dtype = torch.promote_types(x1.dtype, x2.dtype)
    y, _, summed = torch_npu.npu_add_rms_norm(x1.to(dtype), x2.to(dtype), weight, epsilon=epsilon)
    return y, summed


# -- SwiGLU -------------------------------------------------------------------------------------------
# The gate and up projections run as the original runs them (the modules called, or the products
# made, with the parameters they hold now) and their two outputs are concatenated for the kernel: a
# copy of the activations per call, never a [gate; up] weight kept between calls (see "Derived
# state" above: nothing tells when such a copy went stale, and rebuilding it per call costs more).


def is_silu(act):
    """Whether ``act`` is SiLU: ``F.silu``, ``torch.nn.SiLU`` or transformers' ``SiLUActivation``
    (``ACT2FN["silu"]``; a plain ``nn.Module`` whose forward is ``F.silu``)."""
    if act is torch.nn.functional.silu or type(act) is torch.nn.SiLU:
        return True
    cls = type(act)
    return cls.__name__ == "SiLUActivation" and cls.__module__.startswith("transformers.")


def _swiglu_input_why(x):
    """Why npu_swiglu does not take ``x`` (a contiguous, non-empty float tensor of 1-8 dims with an
    even last dim), or None."""
    if not torch.is_tensor(x) or x.dtype not in _FLOATS or not 1 <= x.dim() <= 8:
        return "the gate and up values are not a float tensor of 1 to 8 dims"
    if x.shape[-1] % 2 or x.numel() == 0 or not x.is_contiguous():
        return "the gate and up values are empty, of odd width or not contiguous"
    return None


def _gate_up(gate, up):
    """(``[gate | up]`` on the last dim, the input of npu_swiglu / npu_geglu, None), or (None, why)
    when the halves differ in shape or dtype or the result is not a kernel input."""
    if not (torch.is_tensor(gate) and torch.is_tensor(up)):
        return None, "the gate and up values are not tensors"
    if gate.shape != up.shape or gate.dtype != up.dtype:
        return None, f"gate {tuple(gate.shape)} {_names(gate)} and up {tuple(up.shape)} {_names(up)} differ"
    fused = torch.cat([gate, up], dim=-1)
    why = _swiglu_input_why(fused)
    return (fused, None) if why is None else (None, why)


_NOT_SILU = "the activation is not SiLU"


def swiglu(act, gate, up, *, site=None):
    """``act(gate) * up`` with separate gate and up activations: npu_swiglu on the two concatenated.
    ``site``: counted there (as every function below that takes one)."""
    fused, why = _gate_up(gate, up) if is_silu(act) else (None, _NOT_SILU)
    return torch_npu.npu_swiglu(fused, dim=-1) if _record(site, why) else act(gate) * up


def swiglu_halves(act, gate_up, *, second=False, site=None):
    """``gate, up = gate_up.chunk(2, dim=-1); act(gate) * up`` (gate is the first half). ``second``: the
    second half is the gate (``up, gate = ...``); npu_swiglu activates the first half only, so the
    halves are swapped into [gate | up] (a copy, as for two projections: ``swiglu``)."""
    if second:
        up, gate = gate_up.chunk(2, dim=-1)
        return swiglu(act, gate, up, site=site)
    if _record(site, _swiglu_input_why(gate_up) if is_silu(act) else _NOT_SILU):
        return torch_npu.npu_swiglu(gate_up, dim=-1)
    gate, up = gate_up.chunk(2, dim=-1)
    return act(gate) * up


def _gated(act, gate, up, x, up_first):
    """The original ``act(gate(x)) * up(x)`` (``up_first``: ``up(x) * act(gate(x))``, up called first)."""
    if up_first:
        up_out = up(x)
        return act(gate(x)) * up_out
    return act(gate(x)) * up(x)


def _projections(gate, up, x, up_first):
    """``(gate(x), up(x))`` called in the original's order: an activation that is a pure function (SiLU,
    GELU) may run after both, nothing else moves."""
    if up_first:
        up_out = up(x)
        return gate(x), up_out
    return gate(x), up(x)


def swiglu_linear(act, gate, up, x, *, up_first=False, site=None):
    """``act(gate(x)) * up(x)`` for two projection modules: both called as the original calls them
    (any module: its current weights, hooks, parametrizations and overridden forward all apply),
    then npu_swiglu on their outputs concatenated. ``up_first``: the original reads ``up(x) *
    act(gate(x))``, calling ``up`` first (the order matters to modules that draw random numbers).
    Elsewhere (not SiLU, outputs of other shapes or dtypes) the original runs."""
    if not is_silu(act):
        _record(site, _NOT_SILU)
        return _gated(act, gate, up, x, up_first)
    return swiglu(act, *_projections(gate, up, x, up_first), site=site)


#: transformers' GELU activation classes (``ACT2FN["gelu_new"]``, ...) and the approximation each computes
_GELU_CLASSES = {"GELUActivation": "none", "GELUTanh": "tanh", "PytorchGELUTanh": "tanh", "NewGELUActivation": "tanh",
                 "FastGELUActivation": "tanh", "AccurateGELUActivation": "tanh"}
#: npu_geglu's ``approximate``: 0 = erf GELU (F.gelu's "none"), 1 = tanh
_GELU_MODES = {"none": 0, "tanh": 1}
_geglu_first_flag = {}  # device -> the activate_left value that makes npu_geglu activate the FIRST half


def gelu_approximation(act):
    """"none" or "tanh" when ``act`` is a GELU (``F.gelu``, ``nn.GELU``, transformers' GELU classes), else None."""
    if act is torch.nn.functional.gelu:
        return "none"
    if type(act) is torch.nn.GELU:
        return act.approximate if act.approximate in _GELU_MODES else None
    cls = type(act)
    return _GELU_CLASSES.get(cls.__name__) if cls.__module__.startswith("transformers.") else None


def is_glu(act, *, when=True, site=None):
    """Whether ``act`` is an activation of a fused gated-MLP kernel: SiLU (npu_swiglu) or GELU (npu_geglu)."""
    glu = is_silu(act) or gelu_approximation(act) is not None
    return _record(site, None if glu else "the activation is neither SiLU nor GELU", when=when, final=False)


def _geglu_first(device):
    """The ``activate_left`` that makes npu_geglu activate the first half on ``device``: CANN versions
    document opposite meanings of the flag, so it is asked of the kernel once per device (one tiny call
    and one sync per process); None under torch.compile before it is known."""
    flag = _geglu_first_flag.get(device)
    if flag is None and not _compiling():
        with torch.no_grad():
            probe = torch.tensor([[1.0, 2.0]], device=device)
            out = float(torch_npu.npu_geglu(probe, dim=-1, approximate=0, activate_left=True)[0])
        first, second = 2 * 0.5 * (1 + math.erf(1 / math.sqrt(2))), 2 * 0.5 * (1 + math.erf(2 / math.sqrt(2)))
        flag = _geglu_first_flag[device] = abs(out - first) < abs(out - second)
    return flag


def _geglu(gate_up, approximate, site, second=False):
    """npu_geglu on [gate | up] with the gate activated (``second``: on [up | gate], the second half
    activated), or None when it does not apply."""
    mode = _GELU_MODES.get(approximate)
    why = "the activation is not a GELU npu_geglu computes" if mode is None else _swiglu_input_why(gate_up)
    flag = _geglu_first(gate_up.device) if why is None else None
    if why is None and flag is None:
        why = "npu_geglu's activate_left is not known yet under torch.compile"
    if not _record(site, why):
        return None
    return torch_npu.npu_geglu(gate_up, dim=-1, approximate=mode, activate_left=flag != second)[0]


def _gelu(act, approximate):
    return act if act is not None else lambda t: torch.nn.functional.gelu(t, approximate=approximate)


def geglu_halves(act, gate_up, approximate=None, *, second=False, site=None):
    """``gate, up = gate_up.chunk(2, dim=-1); act(gate) * up`` for a GELU ``act`` (``None``: ``F.gelu``
    with ``approximate``) on npu_geglu, the original elsewhere. ``second``: the second half is the gate
    (``up, gate = ...``), which npu_geglu's ``activate_left`` activates in place (no copy)."""
    fused = _geglu(gate_up, approximate or gelu_approximation(act), site, second)
    if fused is not None:
        return fused
    gate, up = gate_up.chunk(2, dim=-1)
    if second:
        gate, up = up, gate
    return _gelu(act, approximate)(gate) * up


_NOT_GELU = "the activation is not a GELU npu_geglu computes"


def geglu(act, gate, up, approximate=None, *, site=None):
    """``act(gate) * up`` for a GELU ``act`` (``None``: ``F.gelu`` with ``approximate``) and separate gate
    and up values: npu_geglu on the two concatenated (as ``swiglu``); the original elsewhere."""
    approximate = approximate or gelu_approximation(act)
    gelu = _gelu(act, approximate)
    gate_up, why = _gate_up(gate, up) if approximate in _GELU_MODES else (None, _NOT_GELU)
    if why is not None:
        _record(site, why)
    fused = _geglu(gate_up, approximate, site) if why is None else None
    return fused if fused is not None else gelu(gate) * up


def geglu_linear(act, gate, up, x, *, approximate=None, up_first=False, site=None):
    """``act(gate(x)) * up(x)`` for a GELU ``act`` (``None``: ``F.gelu`` with ``approximate``) and two
    projection modules called as the original calls them (as ``swiglu_linear``), then npu_geglu on
    their outputs concatenated (``geglu``); the original elsewhere."""
    approximate = approximate or gelu_approximation(act)
    if approximate not in _GELU_MODES:
        _record(site, _NOT_GELU)
        return _gated(_gelu(act, approximate), gate, up, x, up_first)
    return geglu(act, *_projections(gate, up, x, up_first), approximate, site=site)


def glu(act, gate, up, *, site=None):
    """``swiglu`` or ``geglu`` for an activation known only at run time (``ACT2FN[...]``)."""
    if gelu_approximation(act) is not None:
        return geglu(act, gate, up, site=site)
    return swiglu(act, gate, up, site=site)


def glu_halves(act, gate_up, *, second=False, site=None):
    """``swiglu_halves`` or ``geglu_halves`` for an activation known only at run time (``ACT2FN[...]``)."""
    if gelu_approximation(act) is not None:
        return geglu_halves(act, gate_up, second=second, site=site)
    return swiglu_halves(act, gate_up, second=second, site=site)


def glu_linear(act, gate, up, x, *, up_first=False, site=None):
    """``swiglu_linear`` or ``geglu_linear`` for an activation known only at run time (``ACT2FN[...]``)."""
    if gelu_approximation(act) is not None:
        return geglu_linear(act, gate, up, x, up_first=up_first, site=site)
    return swiglu_linear(act, gate, up, x, up_first=up_first, site=site)


def swiglu_stacked(act, x, gate_weight, up_weight, *, equation=None, up_first=False, site=None):
    """``act(p(x, gate_weight)) * p(x, up_weight)`` where ``p`` is ``torch.einsum(equation, ...)`` or,
    without an equation, ``torch.matmul`` (expert MLPs): ``swiglu_linear`` with the two products as
    the projections, made with the weights as they are now (training too: every op on the way is
    differentiable)."""
    product = (lambda a, w: torch.einsum(equation, a, w)) if equation else torch.matmul
    return swiglu_linear(act, lambda t: product(t, gate_weight), lambda t: product(t, up_weight), x, up_first=up_first,
                         site=site)


# -- MoE gating ---------------------------------------------------------------------------------------


def moe_gating_fits(logits, k, dim=-1, *, when=True, site=None):
    """``npu_moe_gating_top_k_softmax(logits, None, k)`` computes ``topk(softmax(logits, dim), k)``:
    softmax over the last dim of a 2-D/3-D float tensor, 0 < k <= min(experts, 1024), and no
    gradient needed (the kernel has no backward on a real NPU: routers in training keep the
    original code). ``site``: counted there."""
    return _record(site, _moe_gating_why(logits, k, dim), when=when)


def _moe_gating_why(logits, k, dim):
    if not torch.is_tensor(logits) or logits.dtype not in _FLOATS or logits.dim() not in (2, 3):
        return "the logits are not a 2-D/3-D float tensor"
    if dim not in (-1, logits.dim() - 1):
        return "the softmax is not over the last dim"
    if isinstance(k, bool) or not isinstance(k, int) or not 0 < k <= min(logits.shape[-1], 1024):
        return f"k={k!r} is not an int in 1..min(experts, 1024)"
    return None if _no_grad_needed(logits) else "a gradient is needed (the kernel has no backward)"


def moe_softmax_v2_fits(logits, k, dim=-1, *, when=True, site=None):
    """``moe_gating_fits`` for ``npu_moe_gating_top_k_softmax_v2``, which older torch_npu releases lack
    (the original code runs there)."""
    if not hasattr(torch_npu, "npu_moe_gating_top_k_softmax_v2"):
        return _record(site, "this torch_npu has no npu_moe_gating_top_k_softmax_v2")
    return moe_gating_fits(logits, k, dim, when=when, site=site)


#: npu_moe_gating_top_k's limits (aclnnMoeGatingTopK): at most 2048 experts, also once each group is
#: rounded up to 32 experts
MOE_MAX_EXPERTS = 2048
#: the group score of the kernel: 0 = the group's max (``top`` 1), 1 = the sum of its two largest
_GROUP_MODES = {1: 0, 2: 1}


def _int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def moe_top_k_fits(logits, k, *, bias=None, k_group=1, group_count=1, group_size=None, group_top=1, experts=None,
                   routed_scaling_factor=1.0, zero_filled=False, norm_out=False, dtype=None, when=True,
                   site=None):
    """``npu_moe_gating_top_k(logits, k, bias=..., k_group=..., group_count=...)`` computes what the
    original router does: 2-D float logits [tokens, E] with E <= 2048 (``experts``: the original
    views its scores as [-1, experts] first), E split into ``group_count`` groups of ``group_size``
    (as the original's view reads them), groups scored by their max or top-2 sum (``group_top``),
    1 <= k_group <= group_count, 1 <= k <= k_group * E / group_count, a bias [E] whose dtype the
    logits' holds (``dtype``: the dtype the kernel gets the logits in, when the code casts them; the
    call casts the bias to it, as ``scores + bias`` promotes it), a Python number as scaling factor. ``zero_filled``: the original masks the experts of the
    dropped groups to 0, not -inf, which only agrees when no kept expert scores below 0 (checked once
    per bias tensor). ``norm_out``: the original reads the scores afterwards; the kernel returns them
    without a gradient, so then nothing may need one. ``site``: counted there."""
    return _record(site, _moe_top_k_why(logits, k, bias, k_group, group_count, group_size, group_top, experts,
                                        routed_scaling_factor, zero_filled, norm_out, dtype), when=when)


def _moe_top_k_why(logits, k, bias, k_group, group_count, group_size, group_top, experts, routed_scaling_factor,
                   zero_filled, norm_out, dtype):
    if not hasattr(torch_npu, "npu_moe_gating_top_k"):  # older torch_npu releases lack it
        return "this torch_npu has no npu_moe_gating_top_k"
    if not torch.is_tensor(logits) or logits.dtype not in _FLOATS or logits.dim() != 2:
        return "the logits are not a 2-D float tensor"
    num = logits.shape[-1]
    if experts is not None and experts != num or not _int(group_count) or group_count < 1 or num % group_count:
        return f"{num} experts do not split into {group_count!r} groups (or the view's {experts!r})"
    per_group = num // group_count
    if group_size is not None and group_size not in (-1, per_group) or group_top not in _GROUP_MODES:
        return "the group size or the group score is not one the kernel takes"
    if group_count > 1 and per_group <= _GROUP_MODES[group_top]:
        return "groups too small for their score"
    if -(-per_group // 32) * 32 * group_count > MOE_MAX_EXPERTS or num > MOE_MAX_EXPERTS:
        return f"over the kernel's {MOE_MAX_EXPERTS} experts"
    if not (_int(k_group) and 1 <= k_group <= group_count and _int(k) and 1 <= k <= per_group * k_group):
        return f"k={k!r} or k_group={k_group!r} out of range"
    if isinstance(routed_scaling_factor, bool) or not isinstance(routed_scaling_factor, (int, float)):
        return "the scaling factor is not a Python number"
    want = dtype or logits.dtype  # the bias is cast to it: exact when the scores' dtype holds the bias's
    if bias is not None and not (torch.is_tensor(bias) and tuple(bias.shape) == (num,) and bias.dtype in _FLOATS
                                 and torch.promote_types(bias.dtype, want) == want and bias.device == logits.device):
        return "the bias is not a float tensor [experts] the scores' dtype holds"
    if norm_out and not _no_grad_needed(logits):
        return "the scores are read afterwards and need a gradient"
    if zero_filled and bias is not None:
        return _failed((bias,), {"a bias is negative (the dropped groups are filled with 0)": lambda: (bias >= 0).all()})
    return None
