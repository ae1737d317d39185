"""Attention (NPU301, NPU302): masks are converted to the NPU convention (bool, True = masked out)
from their current values on every call (elementwise, on the device, no sync), a causal buffer
included: the kernel gets the buffer's values as its mask, never a causal mode chosen from what the
buffer held when the class was written. An additive mask's values (only 0 and minus infinity) and
live query rows are checked on every call unless a rule proves them (``mask_values_proven``,
``live_rows_proven``); rows with every key masked (left padding) need no check where
``fusion_attention`` gives them the original's value on the device. Under ``torch.autocast``, q, k
and v are cast to autocast's dtype (its matmuls and SDPA are on autocast's lower-precision list).
"""

import math
from functools import lru_cache, reduce

import torch
import torch_npu

from .core import _FLOATS, _compiling, _failed, _names, _no_grad_needed, _record


# -- attention ----------------------------------------------------------------------------------------

#: Largest head dim and head count npu_fusion_attention takes.
MAX_HEAD_DIM = 768
MAX_HEADS = 256


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
             mask_values_proven=False, live_rows_proven=False, zero_dead_rows=False, cast_value=False, scale=1.0,
             weights_requested=False, when=True, site=None):
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
    probabilities are read afterwards (the kernel does not form them). ``zero_dead_rows=True``: the
    code zeroes the probabilities where its one ``masked`` mask holds after the softmax
    (``probs.masked_fill(mask, 0)``), which changes nothing but the rows with every key masked:
    ``fusion_attention`` gives those rows zeros too, so they need no check where no gradient is
    needed (with a gradient, the original's is NaN there under a -inf fill: such calls fall back
    when a row is dead, as without the flag). ``site``: counted there
    (see "What ran, per site").
    """
    return _record(site, _can_fuse_why(query, key, value, additive, masked, keep, causal, mask_values_proven,
                                       live_rows_proven or zero_dead_rows and _no_grad_needed(query, key, value),
                                       cast_value, scale, weights_requested),
                   when=when)


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
                     causal=None, live_rows_proven=False, zero_dead_rows=False, **proofs):
    """``torch_npu.npu_fusion_attention(query, key, value, head_num, "BNSD", ...)[0]`` for inputs
    ``can_fuse`` accepted, computing what the original eager attention computes:

    - under autocast, q, k and v are cast to autocast's dtype, as the original's matmuls cast them
      (the result is in that dtype, as the original's ``probs @ v``);
    - the masks go to the kernel converted from their current values (``npu_mask``);
    - a query row with every key masked (left padding) gets the original's value on the device,
      with no sync (``_dead_rows_fixable``): its query is zeroed and its mask opens the keys whose
      mask value is the row's largest, so the kernel's softmax is the uniform one the original's
      is; rows whose largest value is -inf become NaN, as the original's softmax makes them;
    - with ``zero_dead_rows`` (the code zeroes them after its softmax) such a row gets zeros: the
      kernel sees its keys unmasked (a finite row, whose gradient is then zero) and its output is
      set to zero.
    """
    amp = _autocast_dtype(query)
    if amp is not None:
        query, key, value = (t if t.dtype == amp else t.to(amp) for t in (query, key, value))
    masks, _ = _masks(query, key, additive, masked, keep, causal)
    atten_mask, nan_rows, zero_rows = (_combined(masks) if masks else None), None, None
    if masks and zero_dead_rows:
        zero_rows = atten_mask.all(dim=-1, keepdim=True)
        atten_mask = atten_mask & ~zero_rows
    elif masks and not live_rows_proven and _dead_rows_fixable(masks, query, key, value):
        mask = masks[0][1]
        dead = atten_mask.all(dim=-1, keepdim=True)
        top = mask.amax(dim=-1, keepdim=True)
        atten_mask = torch.where(dead, mask != top, atten_mask)
        query = torch.where(dead, torch.zeros((), dtype=query.dtype, device=query.device), query)
        nan_rows = dead & (top == float("-inf"))
    out = torch_npu.npu_fusion_attention(
        query, key, value, head_num, "BNSD", atten_mask=None if atten_mask is None else _fit(atten_mask, query, key),
        scale=scale, keep_prob=keep_prob)[0]
    if zero_rows is not None:
        return torch.where(_fit(zero_rows, query, key)[..., :1], torch.zeros((), dtype=out.dtype, device=out.device), out)
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
