"""Glue for code migrated to Ascend NPUs by npu-migrate (vendored: part of your diff, edit freely).

The fused ``torch_npu`` kernels are exact replacements only under conditions known at run time
(dtype, rank, head dim, mask values, a SiLU activation, no autograd for the inference-only
kernels). The functions here check those conditions and convert masks to the NPU convention; every
migrated call site falls back to its original code when they do not hold.

Cost on the hot path: a guard reads shapes, dtypes, devices, Python values and flags. Conditions
on tensor *values* (an additive mask holds only 0 and minus infinity, no query row is masked
entirely, rotary tables lie in [-1, 1]) need a device->host sync, so each is checked once per
distinct tensor and remembered while that tensor lives unchanged (identity + version counter:
an in-place change re-checks); a forward pass then pays one sync per distinct mask or table, not
one per layer. Inference tensors (``torch.inference_mode``) have no version counter and are
checked on every call. A rule that can see where a mask or table comes from passes a proof flag
(``mask_values_proven``, ``live_rows_proven``, ``table_proven``) and no check runs at all. Under
``torch.compile`` an unproven value condition is never evaluated: the original code runs, so the
graph has no data-dependent branch.

Sections: value checks, attention, rotary embedding, RMSNorm, SwiGLU, MoE gating. Imports only
torch, torch_npu, math, functools and sys.
"""

import math
import sys
from functools import lru_cache, reduce

import torch
import torch_npu
from torch.utils.weak import WeakIdKeyDictionary, WeakIdRef

#: Largest head dim and head count npu_fusion_attention takes.
MAX_HEAD_DIM = 768
MAX_HEADS = 256
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)

#: In a package, migrated files import this module as ``from .npu_glue import npu_glue``: a relative
#: import in the form Hugging Face transformers' remote-code loader finds (``save_pretrained``
#: copies the files a modeling file imports that way, so ``trust_remote_code`` models keep working).
npu_glue = sys.modules[__name__]


# -- value checks, once per distinct tensor ------------------------------------------------------


def _compiling():
    return torch.compiler.is_compiling()


class _Memo:
    """Results computed from tensors' values, reused while every tensor lives unchanged.

    An entry is keyed by each tensor's base (views share it and its version counter), the view's
    data pointer, shape, strides and dtype, and is valid while the version counters are unchanged.
    It holds only weak references to the tensors and is dropped when one is freed, so a new tensor
    that reuses a freed one's id never sees its result; at most ``size`` entries are kept.
    """

    def __init__(self, size=64):
        self._entries = {}
        self._size = size

    def get(self, tensors, extra, compute):
        if not all(_versioned(t) for t in tensors):
            return compute()
        bases = [t if t._base is None else t._base for t in tensors]
        key = (extra, *((id(b), t.data_ptr(), tuple(t.shape), t.stride(), t.dtype) for b, t in zip(bases, tensors)))
        versions = tuple(t._version for t in tensors)
        entry = self._entries.get(key)
        if entry is not None and entry[1] == versions and all(r() is b for r, b in zip(entry[0], bases)):
            return entry[2]
        value = compute()
        drop = lambda _ref, key=key: self._entries.pop(key, None)  # noqa: E731
        self._entries.pop(key, None)
        self._entries[key] = (tuple(WeakIdRef(b, drop) for b in bases), versions, value)
        while len(self._entries) > self._size:
            self._entries.pop(next(iter(self._entries)))
        return value


def _versioned(t):
    """A plain strided tensor with a version counter (inference tensors have none)."""
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided and not t.is_inference()


_converted = _Memo()  # attention masks in the NPU convention
_checked = _Memo()  # value conditions: True / False


def _holds(tensors, conditions):
    """Whether every condition (name -> a function giving a 0-d bool tensor over ``tensors``' values)
    holds: one sync per distinct tensors. Pass only the unproven conditions; under torch.compile, or
    on meta tensors, an unproven condition counts as not holding."""
    if not conditions:
        return True
    if _compiling() or any(t.is_meta for t in tensors):
        return False
    names = tuple(sorted(conditions))
    with torch.no_grad():
        return _checked.get(tensors, names, lambda: bool(reduce(torch.logical_and, [conditions[n]() for n in names])))


# -- attention ----------------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def _causal_mask(device):
    return torch.triu(torch.ones(2048, 2048, dtype=torch.bool, device=device), diagonal=1)


def causal_mask(device):
    """The compressed 2048x2048 mask that sparse_mode 2/3 take (True = masked), built once per device
    (in the graph under torch.compile)."""
    return (_causal_mask.__wrapped__ if _compiling() else _causal_mask)(device)


def _shapes_fit(query, key, value, enable_gqa=True, cast_value=False):
    """q/k/v are [B, N, S, D] tensors of one float dtype npu_fusion_attention accepts (``cast_value``:
    the call casts v to q's dtype and the result back to v's, so v may have another float dtype).
    With fewer K/V heads (GQA) they go to the kernel as they are: head_num is the query's, K/V heads
    divide it."""
    if not all(torch.is_tensor(t) for t in (query, key, value)) or not query.dim() == key.dim() == value.dim() == 4:
        return False
    if query.dtype not in _FLOATS or key.dtype != query.dtype:
        return False
    if value.dtype != query.dtype and not (cast_value and value.dtype in _FLOATS):
        return False
    (b, nq, _, d), (bk, nk, sk, dk), (bv, nv, sv, dv) = query.shape, key.shape, value.shape
    heads_ok = nq == nk if not enable_gqa else nk >= 1 and nq % nk == 0
    return (b == bk == bv and heads_ok and nk == nv and sk == sv and nq <= MAX_HEADS
            and 1 <= d == dk <= MAX_HEAD_DIM and dv <= dk and query.device == key.device == value.device)


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


def _masks(query, key, additive, masked, keep):
    """The (kind, mask) pairs given, or None when one is not a tensor of the right dtype and shape."""
    masks = [(kind, m) for kind, m in (("additive", additive), ("masked", masked), ("keep", keep)) if m is not None]
    for kind, m in masks:
        if not torch.is_tensor(m) or not _broadcasts(m, query, key):
            return None
        if not (m.is_floating_point() if kind == "additive" else m.dtype == torch.bool):
            return None
    return masks


def _term(kind, mask):
    """One mask as a bool tensor, True = masked out. Additive "minus infinity": -inf or about dtype min."""
    if kind == "additive":
        return mask <= torch.finfo(mask.dtype).min / 2
    return mask if kind == "masked" else ~mask


def _combined(masks):
    """The masks as one bool tensor (True = masked out, not yet expanded), converted once per distinct masks."""
    tensors = [m for _, m in masks]
    if _compiling():
        return reduce(torch.logical_or, [_term(kind, m) for kind, m in masks])

    def convert():  # never hold a mask itself (it would stay alive): its index instead
        terms = [_term(kind, m) for kind, m in masks]
        combined = reduce(torch.logical_or, terms)
        return next((i for i, m in enumerate(tensors) if combined is m), combined)

    with torch.no_grad():
        result = _converted.get(tensors, tuple(kind for kind, _ in masks), convert)
    return tensors[result] if isinstance(result, int) else result


def _mask_values_fit(masks, values_proven, rows_proven):
    """An additive mask holds only 0 and minus infinity (the values that convert exactly), and no query
    row masks out every key (eager softmax makes such a row NaN or uniform; the kernel does not)."""
    additive = [m for kind, m in masks if kind == "additive"]
    conditions = {}
    if additive and not values_proven:
        conditions["zero_or_minus_inf"] = lambda: reduce(
            torch.logical_and, [((m == 0) | _combined([("additive", m)])).all() for m in additive])
    if not rows_proven:
        conditions["live_rows:" + ",".join(kind for kind, _ in masks)] = lambda: ~_combined(masks).all(dim=-1).any()
    return _holds([m for _, m in masks], conditions)


def is_scalar(value):
    """A scale the kernel takes (a float): a Python number or a tensor of one element and no dims."""
    if torch.is_tensor(value):
        return value.dim() == 0 and value.is_floating_point()
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def can_fuse(query, key, value, *, additive=None, masked=None, keep=None, causal=None,
             mask_values_proven=False, live_rows_proven=False, cast_value=False):
    """True when npu_fusion_attention computes what the eager attention code does.

    ``additive``: a float mask added to the scores (only 0 and values <= dtype min / 2 convert);
    ``masked``: a bool mask, True = masked out (``masked_fill(cond, -inf)``); ``keep``: a bool mask,
    True = attend (``torch.where(keep, w, min)``); ``causal``: the lower-triangular buffer slice the
    code applies, which must cover the whole [Sq, Skv] score matrix. A row with every key masked
    makes the eager softmax NaN or uniform, which the kernel does not reproduce: those fall back.

    Proofs a rule may pass when it sees how the masks are built (they skip the value checks):
    ``mask_values_proven=True`` when the additive mask holds only 0 and -inf / dtype min by
    construction: ``torch.full(..., -inf)`` then ``torch.triu``/``tril``, ``masked_fill(cond,
    -inf or finfo.min)`` of zeros, or a Hugging Face masking utility (``create_causal_mask`` and
    friends, eager output); ``live_rows_proven=True`` when no query row can be masked entirely: a
    ``torch.tril``/``triu(diagonal=1)`` causal mask with Sq <= Skv and no padding term. A padding
    mask never proves live rows (left padding masks whole rows). ``cast_value``: the fused call runs
    in q's dtype and casts the result to v's.
    """
    if not _shapes_fit(query, key, value, cast_value=cast_value):
        return False
    if causal is not None and (tuple(causal.shape[-2:]) != (query.shape[2], key.shape[2]) or query.shape[2] > key.shape[2]):
        return False
    masks = _masks(query, key, additive, masked, keep)
    if masks is None:
        return False
    return not masks or _mask_values_fit(masks, mask_values_proven, live_rows_proven)


def npu_mask(query, key, *, additive=None, masked=None, keep=None, **proofs):
    """The NPU ``atten_mask`` (bool, True = masked out) for masks ``can_fuse`` accepted; the conversion
    ``can_fuse`` made is reused (``proofs``: the flags passed to can_fuse, accepted for symmetry)."""
    masks = _masks(query, key, additive, masked, keep)
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
         mask_values_proven=False, live_rows_proven=False):
    """``torch.nn.functional.scaled_dot_product_attention`` on the fused NPU kernel when it is exact.

    Differences handled here: the NPU mask is True = masked out (an SDPA bool mask is True =
    attend); SDPA's ``is_causal`` is aligned top-left, which is sparse_mode 2 with the compressed
    mask; the NPU scale defaults to 1.0, SDPA's to 1/sqrt(D); rows with every key masked give 0 in
    SDPA, which needs ``inner_precise=2`` (a float mask's -inf rows give 0 too, but its dtype-min
    rows a uniform average: float masks with dead rows are not converted). The proofs are
    ``can_fuse``'s. Anything else runs the original SDPA.
    """
    fused = _shapes_fit(query, key, value, enable_gqa) and (attn_mask is None or not is_causal) and 0.0 <= dropout_p < 1.0
    keep = torch.is_tensor(attn_mask) and attn_mask.dtype == torch.bool
    masks = [] if attn_mask is None or not fused else _masks(query, key, None if keep else attn_mask, None, attn_mask if keep else None)
    if not (fused and masks is not None and (keep or not masks or _mask_values_fit(masks, mask_values_proven, live_rows_proven))):
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
            enable_gqa=enable_gqa)
    atten_mask = _fit(_combined(masks), query, key) if masks else causal_mask(query.device) if is_causal else None
    return torch_npu.npu_fusion_attention(
        query, key, value, query.shape[1], "BNSD", atten_mask=atten_mask,
        scale=1 / math.sqrt(query.shape[-1]) if scale is None else scale,
        keep_prob=1.0 - dropout_p, sparse_mode=2 if is_causal else 0, inner_precise=2 if keep else 0)[0]


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


def rotary_fits(x, cos, sin, mode="half", *, table_proven=False):
    """True when ``rotary_mul(x, cos, sin, mode)`` computes ``x * cos + rotate(x) * sin`` as the
    original code does (same result shape and dtype, no broadcasting the kernel lacks, tables in
    [-1, 1]: checked once per table). 2-D and 3-D tables count as the 4-D tables they broadcast as.
    A rule may pass ``table_proven=True`` when cos and sin come straight from
    ``torch.cos``/``torch.sin`` (or ``.cos()``/``.sin()``) through views, slicing, indexing,
    ``cat``/``repeat`` of such tables, ``unsqueeze`` and dtype casts only: a product (Hugging
    Face's ``* attention_scaling``) breaks the proof."""
    if not all(torch.is_tensor(t) for t in (x, cos, sin)):
        return False
    if 2 <= cos.dim() < 4 and cos.shape == sin.shape:
        cos, sin = _table(cos), _table(sin)
    if x.dim() != 4 or cos.dim() != 4 or cos.shape != sin.shape or x.numel() == 0:
        return False
    if x.dtype not in _FLOATS or not x.dtype == cos.dtype == sin.dtype or not x.device == cos.device == sin.device:
        return False
    d = x.shape[-1]
    if d % 2 or d >= ROTARY_MAX_HEAD_DIM:
        return False
    if _folds(x, cos, mode):
        x, cos = _fold(x), _fold(cos)
    grads = torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad)
    layouts = [(b, n) for b, n, shapes in _layouts(x.shape, mode) if tuple(cos.shape) in shapes]
    if not layouts or not all(_limits_hold(b, n, mode, grads) for b, n in layouts):
        return False
    unit = {} if table_proven else {"unit_table": lambda: (cos.abs() <= 1).all() & (sin.abs() <= 1).all()}
    return _holds([cos, sin], unit)


def rotary_mul(x, cos, sin, mode="half"):
    """``torch_npu.npu_rotary_mul`` for inputs ``rotary_fits`` accepted."""
    cos, sin = _table(cos), _table(sin)
    if _folds(x, cos, mode):
        return torch_npu.npu_rotary_mul(_fold(x), _fold(cos), _fold(sin), mode).reshape(x.shape)
    return torch_npu.npu_rotary_mul(x, cos, sin, mode)


# Pair tables: code that keeps one cos and one sin per rotated pair, D/2 wide (torchtune's packed
# cache, ChatGLM, Meta/Mistral's complex freqs_cis), rather than one per channel as npu_rotary_mul
# takes them. The per-channel tables are derived once per table tensor and reused while it lives
# unchanged (its identity, view geometry and version counter: an in-place change derives them
# again), so a forward pass derives them once, not once per layer, and checks their values once.


def _wide_tables(cos, sin, mode, dtype):
    """Per-channel (cos, sin) tables derived from pair tables, and whether their values lie in
    [-1, 1]: derived once per pair-table tensor (``_Memo``), on every call where gradients must
    flow into the tables."""
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        return _widen(cos, sin, mode, dtype)
    return _WIDE_TABLES.get((cos, sin), (mode, dtype), lambda: _widen(cos, sin, mode, dtype))


def _widen(cos, sin, mode, dtype):
    """(cos, sin, values in [-1, 1]) per channel: 'interleave' repeats each pair's value in place
    ([c0, c0, c1, c1, ...]), 'half' repeats the table ([c0, c1, ..., c0, c1, ...])."""
    def wide(t):
        t = t.to(dtype)
        return t.repeat_interleave(2, dim=-1) if mode == "interleave" else torch.cat((t, t), dim=-1)

    cos, sin = wide(cos), wide(sin)
    with torch.no_grad():
        unit = bool(((cos.abs() <= 1).all() & (sin.abs() <= 1).all()).item())
    return cos, sin, unit


_WIDE_TABLES = _Memo(size=32)


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


def pair_rotary_fits(x, cos, sin, mode="interleave", *, paired=False, split=False):
    """True when ``pair_rotary_mul`` computes the pair rotation the original code writes out:
    ``mode`` 'interleave' rotates channels (2i, 2i+1), 'half' channels (i, i + D/2), each pair by
    ``cos[..., i]`` and ``sin[..., i]`` (tables D/2 wide, broadcasting to x without growing it):
    ``(a, b) -> (a * cos - b * sin, b * cos + a * sin)``. ``paired``: x is [..., D/2, 2] (channel
    pairs on the last dim, the result too). ``split`` ('interleave' only): the result holds the
    rotated even channels, then the rotated odd ones (DeepSeek's
    ``cat([x0 * cos - x1 * sin, x1 * cos + x0 * sin], -1)``). x has 3 or more dims as [..., D]; the
    result has the dtype the original's products promote to. Leading dims beyond 4 merge into one
    where the tables repeat over them (torchtune's tiled vision rotary: [b, tiles, s, n, D])."""
    if split and (mode != "interleave" or paired):
        return False
    mode = "half" if split else mode  # the even/odd channels put side by side turn as halves
    layout = _pair_layout(x, cos, sin, mode, paired)
    if layout is None or torch.compiler.is_compiling():  # under torch.compile the table values are unproven
        return False
    (b0, b1, b2, d), table, dtype = layout
    x_shape = (b0, b1, b2, d)
    if mode == "interleave" and b0 > 1 and b1 > 1 and table == (b0, b1, 1, d):  # per-batch BS1D: fold B into S
        x_shape, table = (1, b0 * b1, b2, d), (1, b0 * b1, 1, d)
    grads = torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad)
    layouts = [(b, n) for b, n, shapes in _layouts(x_shape, mode) if table in shapes]
    if not layouts or not all(_limits_hold(b, n, mode, grads) for b, n in layouts):
        return False
    return _wide_tables(cos, sin, mode, dtype)[2]


def pair_rotary_mul(x, cos, sin, mode="interleave", *, paired=False, split=False):
    """``npu_rotary_mul`` for inputs ``pair_rotary_fits`` accepted, shaped and typed as the original's result."""
    if split:  # one copy: the even channels, then the odd ones, rotated as halves
        x, mode = torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1), "half"
    x_shape, table_shape, dtype = _pair_layout(x, cos, sin, mode, paired)
    wide_cos, wide_sin, _ = _wide_tables(cos, sin, mode, dtype)
    full = x.to(dtype).reshape(x_shape)
    out = rotary_mul(full, wide_cos.reshape(table_shape), wide_sin.reshape(table_shape), mode)
    return out.reshape(x.shape)


def rotary_fits_cast(x, dtype, cos, sin, mode="half"):
    """``rotary_fits`` for x cast to ``dtype`` (code that rotates ``x.float()``), without making the
    cast: only x's shape and device are read."""
    if not torch.is_tensor(x) or not isinstance(dtype, torch.dtype):
        return False
    return rotary_fits(torch.empty((), dtype=dtype, device=x.device).expand(x.shape), cos, sin, mode)


def complex_rotary_fits(x, freqs_cis):
    """True when ``complex_rotary_mul(x, freqs_cis)`` computes ``torch.view_as_real(x * freqs_cis)``:
    x (channel pairs as complex numbers, [..., D/2]) and freqs_cis (unit complex numbers,
    ``torch.polar(ones, angles)``) complex64, freqs_cis broadcasting to x without growing it."""
    if not (torch.is_tensor(x) and torch.is_tensor(freqs_cis) and x.dtype == freqs_cis.dtype == torch.complex64):
        return False
    return pair_rotary_fits(torch.view_as_real(x), freqs_cis.real, freqs_cis.imag, "interleave", paired=True)


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


def rms_norm_fits(x, weight=_NO_WEIGHT, normalized_shape=None, min_dim=2, *, mixed_dtype=False):
    """``npu_rms_norm(x, weight)`` normalises what the original normalises: x is a float tensor of 2 to
    8 dims; weight (left out when the code has none) covers exactly the normalised trailing dims (the
    last one, unless ``normalized_shape`` says more) and has x's dtype, or, with ``mixed_dtype=True``,
    is float32 for a float16/bfloat16 x (the kernel's mixed precision, as under autocast: the site
    must then use ``rms_norm`` below, which returns the original's dtype)."""
    if not torch.is_tensor(x) or x.dtype not in _FLOATS or not min_dim <= x.dim() <= 8:
        return False
    if normalized_shape is not None:
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if not shape or tuple(x.shape[x.dim() - len(shape):]) != shape:
            return False
    else:
        shape = tuple(x.shape[-1:])
    if weight is _NO_WEIGHT:
        return True
    if not torch.is_tensor(weight) or tuple(weight.shape) != shape:
        return False
    mixed = mixed_dtype and x.dtype in (torch.float16, torch.bfloat16) and weight.dtype == torch.float32
    return weight.dtype == x.dtype or mixed


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
    forward). Migrated code constructs and subclasses it in place of ``torch.nn.RMSNorm``."""

    def forward(self, x):
        weight = _NO_WEIGHT if self.weight is None else self.weight
        if rms_norm_fits(x, weight, normalized_shape=self.normalized_shape, mixed_dtype=True):
            gamma = x.new_ones(self.normalized_shape) if self.weight is None else self.weight
            return rms_norm(x, gamma, rms_norm_eps(self.eps), dtype=x.dtype)
        return super().forward(x)


def gemma_rms_norm_fits(x, weight):
    """``npu_gemma_rms_norm`` has no backward on a real NPU: inference only, else as above."""
    return rms_norm_fits(x, weight, min_dim=1) and _no_grad_needed(x, weight) and x.is_contiguous()


# -- SwiGLU -------------------------------------------------------------------------------------------

#: ``swiglu_linear`` keeps one concatenated [gate; up] weight per MLP (memory: those weights once
#: more). Set False to run such sites unfused instead.
CONCAT_WEIGHTS = True


def is_silu(act):
    """Whether ``act`` is SiLU: ``F.silu``, ``torch.nn.SiLU`` or transformers' ``SiLUActivation``
    (``ACT2FN["silu"]``; a plain ``nn.Module`` whose forward is ``F.silu``)."""
    if act is torch.nn.functional.silu or type(act) is torch.nn.SiLU:
        return True
    cls = type(act)
    return cls.__name__ == "SiLUActivation" and cls.__module__.startswith("transformers.")


def _swiglu_input_fits(x):
    """npu_swiglu takes a contiguous, non-empty float tensor of 1-8 dims with an even last dim."""
    return (torch.is_tensor(x) and x.dtype in _FLOATS and 1 <= x.dim() <= 8 and x.shape[-1] % 2 == 0
            and x.numel() > 0 and x.is_contiguous())


def swiglu(act, gate, up):
    """``act(gate) * up`` with separate gate and up activations (concatenated per call: prefer
    ``swiglu_linear`` where both come from nn.Linear projections)."""
    if is_silu(act) and torch.is_tensor(gate) and torch.is_tensor(up) and gate.shape == up.shape and gate.dtype == up.dtype:
        fused = torch.cat([gate, up], dim=-1)
        if _swiglu_input_fits(fused):
            return torch_npu.npu_swiglu(fused, dim=-1)
    return act(gate) * up


def swiglu_halves(act, gate_up):
    """``gate, up = gate_up.chunk(2, dim=-1); act(gate) * up`` (gate is the first half)."""
    if is_silu(act) and _swiglu_input_fits(gate_up):
        return torch_npu.npu_swiglu(gate_up, dim=-1)
    gate, up = gate_up.chunk(2, dim=-1)
    return act(gate) * up


def _hooks(module):
    """The hook tables a call of ``module`` runs: its own and the global ones, forward and backward."""
    glob = torch.nn.modules.module
    kinds = ("forward_hooks", "forward_pre_hooks", "backward_hooks", "backward_pre_hooks")
    return [getattr(module, "_" + kind, {}) for kind in kinds] + [getattr(glob, "_global_" + kind, {}) for kind in kinds]


def _plain_linear(module):
    """``module(x)`` is exactly ``F.linear(x, module.weight, module.bias)``: an nn.Linear whose forward
    is not overridden, with its own plain parameters (no parametrization, pruning, quantized or
    inference-mode weights) and no hooks other than observers (hooks marked ``hook.observes_only =
    True`` change no input, output or gradient; they do not see the fused call)."""
    if not isinstance(module, torch.nn.Linear) or getattr(module.forward, "__func__", None) is not torch.nn.Linear.forward:
        return False
    params = module._parameters
    weight = params.get("weight")
    if weight is None or weight is not module.weight or params.get("bias") is not module.bias:
        return False
    if not all(type(t) in (torch.nn.Parameter, torch.Tensor) and not t.is_inference() for t in (weight, module.bias) if t is not None):
        return False
    return all(getattr(h, "observes_only", False) for hooks in _hooks(module) for h in hooks.values())


_concatenated = WeakIdKeyDictionary()  # gate module -> (parameters' state, [gate; up] weight, bias)


def _state(t):
    return None if t is None else (id(t), t._version, t.data_ptr(), t.dtype, tuple(t.shape))


def _concat(gate, up):
    """[gate.weight; up.weight] and the biases likewise, built once per parameter version (an
    optimizer step, ``load_state_dict`` or ``.to()`` rebuilds them)."""
    params = (gate.weight, up.weight, gate.bias, up.bias)
    if _compiling():
        return torch.cat(params[:2]), None if gate.bias is None else torch.cat(params[2:])
    state = (id(up), *(_state(t) for t in params))
    entry = _concatenated.get(gate)
    if entry is None or entry[0] != state:
        with torch.no_grad():
            entry = (state, torch.cat(params[:2]), None if gate.bias is None else torch.cat(params[2:]))
        _concatenated[gate] = entry
    return entry[1], entry[2]


class _PairedLinear(torch.autograd.Function):
    """``F.linear(x, [wg; wu], [bg; bu])`` on the cached concatenation, with gradients for the
    original parameters (rows of the concatenated weight's gradient)."""

    @staticmethod
    def forward(ctx, x, weight, bias, wg, wu, bg, bu):
        ctx.save_for_backward(x, weight)
        ctx.dtypes = (x.dtype, wg.dtype, None if bg is None else bg.dtype)
        return torch.nn.functional.linear(x, weight, bias)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        rows = grad.reshape(-1, grad.shape[-1])
        grad_x = (grad @ weight.to(grad.dtype)).to(x_dtype) if ctx.needs_input_grad[0] else None
        grad_w = (rows.t() @ x.reshape(-1, x.shape[-1]).to(grad.dtype)).to(w_dtype).chunk(2)
        grad_b = rows.sum(0).to(b_dtype).chunk(2) if b_dtype is not None else (None, None)
        return grad_x, None, None, *grad_w, *grad_b


def swiglu_linear(act, gate, up, x, *, up_first=False):
    """``act(gate(x)) * up(x)`` for two nn.Linear projections: one matmul against the concatenated
    [gate; up] weight, whose output is already npu_swiglu's [gate | up] input (no per-call copy of the
    activations). Gradients reach gate's and up's own parameters. Cost: the concatenation holds both
    weights once more in memory and is rebuilt whenever they change (in training once per optimizer
    step: a copy of the weights, not of the activations); ``CONCAT_WEIGHTS = False`` trades the
    fusion for that memory. Elsewhere the original runs, calling ``up`` first with ``up_first=True``
    (for ``up(x) * act(gate(x))``: the order matters to modules that draw random numbers)."""
    fits = (CONCAT_WEIGHTS and is_silu(act) and torch.is_tensor(x) and x.numel() > 0
            and _plain_linear(gate) and _plain_linear(up) and gate.weight.shape == up.weight.shape
            and gate.weight.dtype == up.weight.dtype and (gate.bias is None) == (up.bias is None)
            and x.shape[-1] == gate.weight.shape[1])
    if not fits and up_first:
        up_out = up(x)
        return act(gate(x)) * up_out
    if not fits:
        return act(gate(x)) * up(x)
    weight, bias = _concat(gate, up)
    params = (gate.weight, up.weight, gate.bias, up.bias)
    if _compiling() or _no_grad_needed(*params):
        gate_up = torch.nn.functional.linear(x, weight, bias)
    else:
        gate_up = _PairedLinear.apply(x, weight, bias, *params)
    if _swiglu_input_fits(gate_up):
        return torch_npu.npu_swiglu(gate_up, dim=-1)
    gate_out, up_out = gate_up.chunk(2, dim=-1)
    return act(gate_out) * up_out


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


def is_glu(act):
    """Whether ``act`` is an activation of a fused gated-MLP kernel: SiLU (npu_swiglu) or GELU (npu_geglu)."""
    return is_silu(act) or gelu_approximation(act) is not None


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


def _geglu(gate_up, approximate):
    """npu_geglu on [gate | up] with the gate activated, or None when it does not apply."""
    mode = _GELU_MODES.get(approximate)
    if mode is None or not _swiglu_input_fits(gate_up):
        return None
    flag = _geglu_first(gate_up.device)
    return None if flag is None else torch_npu.npu_geglu(gate_up, dim=-1, approximate=mode, activate_left=flag)[0]


def _gelu(act, approximate):
    return act if act is not None else lambda t: torch.nn.functional.gelu(t, approximate=approximate)


def geglu_halves(act, gate_up, approximate=None):
    """``gate, up = gate_up.chunk(2, dim=-1); act(gate) * up`` for a GELU ``act`` (``None``: ``F.gelu``
    with ``approximate``) on npu_geglu, the original elsewhere."""
    fused = _geglu(gate_up, approximate or gelu_approximation(act))
    if fused is not None:
        return fused
    gate, up = gate_up.chunk(2, dim=-1)
    return _gelu(act, approximate)(gate) * up


def geglu_linear(act, gate, up, x, *, approximate=None, up_first=False):
    """``act(gate(x)) * up(x)`` for a GELU ``act`` (``None``: ``F.gelu`` with ``approximate``) and two
    nn.Linear projections: one matmul against the cached [gate; up] weight (as ``swiglu_linear``),
    then npu_geglu; the original elsewhere."""
    approximate = approximate or gelu_approximation(act)
    gelu = _gelu(act, approximate)
    fits = (CONCAT_WEIGHTS and approximate in _GELU_MODES and torch.is_tensor(x) and x.numel() > 0
            and _plain_linear(gate) and _plain_linear(up) and gate.weight.shape == up.weight.shape
            and gate.weight.dtype == up.weight.dtype and (gate.bias is None) == (up.bias is None)
            and x.shape[-1] == gate.weight.shape[1] and _geglu_first(x.device) is not None)
    if not fits and up_first:
        up_out = up(x)
        return gelu(gate(x)) * up_out
    if not fits:
        return gelu(gate(x)) * up(x)
    weight, bias = _concat(gate, up)
    params = (gate.weight, up.weight, gate.bias, up.bias)
    if _compiling() or _no_grad_needed(*params):
        gate_up = torch.nn.functional.linear(x, weight, bias)
    else:
        gate_up = _PairedLinear.apply(x, weight, bias, *params)
    fused = _geglu(gate_up, approximate)
    if fused is not None:
        return fused
    gate_out, up_out = gate_up.chunk(2, dim=-1)
    return gelu(gate_out) * up_out


def glu_halves(act, gate_up):
    """``swiglu_halves`` or ``geglu_halves`` for an activation known only at run time (``ACT2FN[...]``)."""
    if gelu_approximation(act) is not None:
        return geglu_halves(act, gate_up)
    return swiglu_halves(act, gate_up)


def glu_linear(act, gate, up, x, *, up_first=False):
    """``swiglu_linear`` or ``geglu_linear`` for an activation known only at run time (``ACT2FN[...]``)."""
    if gelu_approximation(act) is not None:
        return geglu_linear(act, gate, up, x, up_first=up_first)
    return swiglu_linear(act, gate, up, x, up_first=up_first)


_stacked = _Memo(size=256)  # swiglu_stacked's [gate | up] weights, per weight version (one per expert)


def swiglu_stacked(act, x, gate_weight, up_weight, *, equation=None, dim=-1, up_first=False):
    """``act(p(x, gate_weight)) * p(x, up_weight)`` where ``p`` is ``torch.einsum(equation, ...)`` or,
    without an equation, ``torch.matmul``: one product against the two weights concatenated along
    ``dim`` (the weight axis that becomes the output's last; built once per weight version), whose
    output is npu_swiglu's [gate | up] input. Inference only (the weights must not need gradients);
    elsewhere the original runs."""
    product = (lambda a, w: torch.einsum(equation, a, w)) if equation else torch.matmul
    fits = (CONCAT_WEIGHTS and is_silu(act) and not _compiling() and torch.is_tensor(x)
            and torch.is_tensor(gate_weight) and torch.is_tensor(up_weight) and gate_weight.shape == up_weight.shape
            and gate_weight.dtype == up_weight.dtype and _versioned(gate_weight) and _versioned(up_weight)
            and _no_grad_needed(gate_weight, up_weight))
    if fits:
        weight = _stacked.get((gate_weight, up_weight), ("stack", dim), lambda: torch.cat((gate_weight, up_weight), dim=dim))
        gate_up = product(x, weight)
        if _swiglu_input_fits(gate_up):
            return torch_npu.npu_swiglu(gate_up, dim=-1)
    if up_first:
        up_out = product(x, up_weight)
        return act(product(x, gate_weight)) * up_out
    return act(product(x, gate_weight)) * product(x, up_weight)


# -- MoE gating ---------------------------------------------------------------------------------------


def moe_gating_fits(logits, k, dim=-1):
    """``npu_moe_gating_top_k_softmax(logits, None, k)`` computes ``topk(softmax(logits, dim), k)``:
    softmax over the last dim of a 2-D/3-D float tensor, 0 < k <= min(experts, 1024), and no
    gradient needed (the kernel has no backward on a real NPU: routers in training keep the
    original code)."""
    if not torch.is_tensor(logits) or logits.dtype not in _FLOATS or logits.dim() not in (2, 3):
        return False
    if dim not in (-1, logits.dim() - 1):
        return False
    if isinstance(k, bool) or not isinstance(k, int) or not 0 < k <= min(logits.shape[-1], 1024):
        return False
    return _no_grad_needed(logits)


def moe_softmax_v2_fits(logits, k, dim=-1):
    """``moe_gating_fits`` for ``npu_moe_gating_top_k_softmax_v2``, which older torch_npu releases lack
    (the original code runs there)."""
    return hasattr(torch_npu, "npu_moe_gating_top_k_softmax_v2") and moe_gating_fits(logits, k, dim)


#: npu_moe_gating_top_k's limits (aclnnMoeGatingTopK): at most 2048 experts, also once each group is
#: rounded up to 32 experts
MOE_MAX_EXPERTS = 2048
#: the group score of the kernel: 0 = the group's max (``top`` 1), 1 = the sum of its two largest
_GROUP_MODES = {1: 0, 2: 1}


def _int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def moe_top_k_fits(logits, k, *, bias=None, k_group=1, group_count=1, group_size=None, group_top=1, experts=None,
                   routed_scaling_factor=1.0, zero_filled=False, norm_out=False, dtype=None):
    """``npu_moe_gating_top_k(logits, k, bias=..., k_group=..., group_count=...)`` computes what the
    original router does: 2-D float logits [tokens, E] with E <= 2048 (``experts``: the original
    views its scores as [-1, experts] first), E split into ``group_count`` groups of ``group_size``
    (as the original's view reads them), groups scored by their max or top-2 sum (``group_top``),
    1 <= k_group <= group_count, 1 <= k <= k_group * E / group_count, a bias [E] whose dtype the
    logits' holds (``dtype``: the dtype the kernel gets the logits in, when the code casts them; the
    call casts the bias to it, as ``scores + bias`` promotes it), a Python number as scaling factor. ``zero_filled``: the original masks the experts of the
    dropped groups to 0, not -inf, which only agrees when no kept expert scores below 0 (checked once
    per bias tensor). ``norm_out``: the original reads the scores afterwards; the kernel returns them
    without a gradient, so then nothing may need one."""
    if not hasattr(torch_npu, "npu_moe_gating_top_k"):  # older torch_npu releases lack it
        return False
    if not torch.is_tensor(logits) or logits.dtype not in _FLOATS or logits.dim() != 2:
        return False
    num = logits.shape[-1]
    if experts is not None and experts != num or not _int(group_count) or group_count < 1 or num % group_count:
        return False
    per_group = num // group_count
    if group_size is not None and group_size not in (-1, per_group) or group_top not in _GROUP_MODES:
        return False
    if group_count > 1 and per_group <= _GROUP_MODES[group_top]:
        return False
    if -(-per_group // 32) * 32 * group_count > MOE_MAX_EXPERTS or num > MOE_MAX_EXPERTS:
        return False
    if not (_int(k_group) and 1 <= k_group <= group_count and _int(k) and 1 <= k <= per_group * k_group):
        return False
    if isinstance(routed_scaling_factor, bool) or not isinstance(routed_scaling_factor, (int, float)):
        return False
    want = dtype or logits.dtype  # the bias is cast to it: exact when the scores' dtype holds the bias's
    if bias is not None and not (torch.is_tensor(bias) and tuple(bias.shape) == (num,) and bias.dtype in _FLOATS
                                 and torch.promote_types(bias.dtype, want) == want and bias.device == logits.device):
        return False
    if norm_out and not _no_grad_needed(logits):
        return False
    if zero_filled and bias is not None:
        return _holds((bias,), {"nonnegative": lambda: (bias >= 0).all()})
    return True
