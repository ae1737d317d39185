"""``npu_fusion_attention``: torch_npu's training FlashAttention, emulated (facts §2.1).

Real semantics, including the traps a migration can fall into:

* ``atten_mask`` is bool/uint8 with True/1 = masked OUT (the opposite of an SDPA bool mask);
  additive float masks are refused (pass those as ``pse``). Shapes BNSS, B1SS, 11SS, SS
  (TND: SS only, maxSq x maxSkv, applied top-left to every sequence).
* ``scale`` defaults to 1.0 and multiplies ``QK^T + pse`` (pse_type=1: ``scale*(QK^T + pse)``).
* ``atten_mask=None`` means full attention: sparse_mode, pre_tockens and next_tockens are ignored.
* sparse_mode 0: mask as given, plus the pre/next band anchored top-left; 1: mask only;
  2 / 3: causal anchored top-left / bottom-right; 4: the pre/next band anchored bottom-right.
  Modes 2/3/4 take the compressed 2048x2048 ``triu(ones, 1)`` mask (checked) and derive the
  pattern for the real Sq x Skv. Modes 5-8 (prefix, cross-card varlen) are not emulated.
* TND takes cumulative ``actual_seq_qlen`` / ``actual_seq_kvlen`` without a leading 0 (facts §2.1:
  lengths ``2 2 2 2 2`` are passed as ``2 4 6 8 10``); zero-length batches repeat a value
  (``[2, 4, 4, 6, 8]``) and trailing zeros (``[2, 4, 0, 0]``) skip the batches they stand for
  ("zero-length batches allowed, trailing zeros skip batches"). The last non-zero entry must equal
  the token count T. A query row whose sequence has no keys comes out as 0.
* TND softmax statistics: ``softmax_layout=""`` (the default) returns them as [N, T, 8] (NTD, facts
  §2.1 "TND softmax outputs are NTD"), ``softmax_layout="TND"`` as [T, N, 8] (the layout torch_npu's
  own TND test compares against: ``x_max.permute(0, 2, 1, 3)`` reshaped to (T, N1, 8)).
* Fully masked rows: see ``kernels._attention_core`` (mean of V; 0 with the invalid-row correction
  of ``inner_precise=2``, which the kernel also applies by itself for ``sparse_mode=3``: facts §2.1
  "auto-enabled in some cases (e.g. sparse_mode 3 with Sq>Skv)", §0(v) 11).
* Dropout (``keep_prob`` < 1) draws its seed from torch's default generator, so
  ``torch.manual_seed`` makes it repeat; the returned ``seed`` is that seed, ``offset`` 0,
  ``numels`` the number of dropout-mask elements (all three 0 without dropout). The ``seed`` /
  ``offset`` arguments, ``gen_mask_parallel`` and ``sync`` only steer the real mask generator
  and are ignored.
* Differentiable in query/key/value (pse gets no gradient: the NPU grad op returns no dpse).
"""

from __future__ import annotations

import torch

from npu_migrate.kernels import _attention_core as core
from npu_migrate.kernels._checks import NpuOpError, check_dtypes, check_same_dtype, require
from npu_migrate.kernels._common import FLOATS
from npu_migrate.kernels.registry import npu_op

OP = "npu_fusion_attention"
LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")
_MAX_D = 768
_MAX_HEADS = 256
_MAX_VARLEN_BATCH = 2048


def _as_bnsd(name: str, t: torch.Tensor, layout: str, head_dim: int = 0, heads: int = 0) -> torch.Tensor:
    """``t`` viewed as [B, N, S, D]; TND becomes [1, N, T, D]. BSH/SBH split H into ``heads``
    heads, or into heads of ``head_dim``."""
    rank = 3 if layout in ("BSH", "SBH", "TND") else 4
    require(t.dim() == rank, OP, f"{name} must be {rank}-D for input_layout={layout}, got shape {tuple(t.shape)}")
    if layout == "TND":
        return t.permute(1, 0, 2).unsqueeze(0)
    if layout in ("BSH", "SBH"):
        h = t.shape[2]
        parts = f"{heads} heads" if heads else f"heads of dim {head_dim} (query H / head_num)"
        require(h % (heads or head_dim) == 0, OP, f"{name} hidden size {h} cannot be split into {parts}: check head_num")
        return core.to_bnsd(t, layout, heads or h // head_dim)
    return core.to_bnsd(t, layout, 0)


def _check_shapes(q, k, v, head_num: int) -> None:
    B, N, _, D = q.shape
    Bk, Nkv, Skv, Dk = k.shape
    Bv, Nv, Sv, Dv = v.shape
    require(N == head_num, OP, f"query has {N} heads but head_num={head_num}")
    require(B == Bk == Bv, OP, f"query/key/value batch sizes differ: {B}, {Bk}, {Bv}")
    require(Nkv == Nv and Skv == Sv, OP, f"key and value must agree on heads and length: {tuple(k.shape)} vs {tuple(v.shape)} (BNSD)")
    require(Nkv >= 1 and head_num % Nkv == 0, OP, f"head_num ({head_num}) must be a multiple of the key/value heads ({Nkv}) for GQA/MQA")
    require(1 <= D <= _MAX_D, OP, f"head dim D must be in [1, {_MAX_D}], got {D}")
    require(Dk == D, OP, f"query and key head dims must be equal, got {D} and {Dk}")
    require(Dv <= Dk, OP, f"value head dim ({Dv}) must not exceed the key head dim ({Dk})")


def _mask_4d(mask: torch.Tensor, B: int, N: int, sq: int, skv: int, varlen: bool) -> torch.Tensor:
    shape = tuple(mask.shape)
    allowed = {(sq, skv): "SS"} if varlen else {
        (B, N, sq, skv): "BNSS", (B, 1, sq, skv): "B1SS", (1, 1, sq, skv): "11SS", (sq, skv): "SS",
    }
    require(
        shape in allowed, OP,
        f"atten_mask shape {shape} is not one of " + ", ".join(f"{n} {s}" for s, n in allowed.items())
        + (" (TND takes only a maxSq x maxSkv mask)" if varlen else ""),
    )
    return mask.view(1, 1, sq, skv) if mask.dim() == 2 else mask


def _pse_4d(pse: torch.Tensor, B: int, N: int, sq: int, skv: int) -> torch.Tensor:
    shape = tuple(pse.shape)
    allowed = {(B, N, sq, skv): "BNSS", (B, N, 1, skv): "BN1Skv", (1, N, sq, skv): "1NSS"}
    require(shape in allowed, OP, f"pse shape {shape} is not one of " + ", ".join(f"{n} {s}" for s, n in allowed.items()))
    return pse


def _seq_lengths(name: str, cum, total: int) -> list:
    """Per-batch lengths from a cumulative list; trailing zeros are batches that are skipped."""
    require(cum is not None, OP, f"input_layout=TND needs {name} (cumulative lengths, no leading 0)")
    cum = [int(c) for c in cum]
    require(1 <= len(cum) <= _MAX_VARLEN_BATCH, OP, f"{name} must list 1 to {_MAX_VARLEN_BATCH} sequences, got {len(cum)}")
    used = len(cum)
    while used and cum[used - 1] == 0:
        used -= 1
    ends = cum[:used]
    lengths = [b - a for a, b in zip([0] + ends[:-1], ends)]
    require(all(n >= 0 for n in lengths), OP,
            f"{name} must be cumulative (non-decreasing, no leading 0; trailing zeros skip batches), got {cum}")
    last = ends[-1] if ends else 0
    require(last == total, OP, f"{name} must end at the token count {total}, got {last}")
    return lengths + [0] * (len(cum) - used)


def _check_args(query, key, value, pse, padding_mask, atten_mask, keep_prob, inner_precise,
                sparse_mode, softmax_layout, sink, dropout_mask, input_layout) -> str:
    check_dtypes(OP, FLOATS, query=query, key=key, value=value, pse=pse)
    check_same_dtype(OP, query=query, key=key, value=value, pse=pse)
    layout = str(input_layout).upper()
    require(layout in LAYOUTS, OP, f"input_layout must be one of {', '.join(LAYOUTS)}, got {input_layout!r}")
    require(padding_mask is None, OP, "padding_mask is not supported (the real op rejects it); use atten_mask")
    for name, t in (("sink", sink), ("dropout_mask", dropout_mask)):
        require(t is None, OP, f"{name} is not emulated")
    if sparse_mode in (5, 6, 7, 8):
        raise NpuOpError(f"{OP}: sparse_mode={sparse_mode} (prefix / cross-card varlen) is not emulated; use 0-4")
    require(sparse_mode in (0, 1, 2, 3, 4), OP, f"sparse_mode must be 0-8, got {sparse_mode}")
    require(0 < keep_prob <= 1, OP, f"keep_prob must be in (0, 1], got {keep_prob}")
    require(inner_precise in (0, 1, 2), OP, f"inner_precise must be 0, 1 or 2, got {inner_precise}")
    require(softmax_layout in ("", "TND"), OP, f"softmax_layout must be '' or 'TND', got {softmax_layout!r}")
    if atten_mask is not None:
        core.bool_mask(OP, atten_mask)
    return layout


@npu_op
def npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None,
                         atten_mask=None, scale=1., keep_prob=1., pre_tockens=2147483647,
                         next_tockens=2147483647, inner_precise=0, prefix=None, actual_seq_qlen=None,
                         actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True, sync=False,
                         softmax_layout="", sink=None, dropout_mask=None, seed=0, offset=0):
    layout = _check_args(query, key, value, pse, padding_mask, atten_mask, keep_prob, inner_precise,
                         sparse_mode, softmax_layout, sink, dropout_mask, input_layout)
    varlen = layout == "TND"
    require(varlen or (actual_seq_qlen is None and actual_seq_kvlen is None), OP,
            "actual_seq_qlen/actual_seq_kvlen are only used with input_layout=TND")
    require(not (varlen and pse is not None), OP, "pse with input_layout=TND is not emulated")
    require(1 <= head_num <= _MAX_HEADS, OP, f"head_num must be in [1, {_MAX_HEADS}], got {head_num}")
    q = _as_bnsd("query", query, layout, heads=head_num)
    k = _as_bnsd("key", key, layout, head_dim=q.shape[3])
    v = _as_bnsd("value", value, layout, heads=k.shape[1])  # BSH value: Nkv heads of Dv <= D
    _check_shapes(q, k, v, head_num)
    B, N, Sq, _ = q.shape
    Nkv, Skv = k.shape[1], k.shape[2]

    mask = core.bool_mask(OP, atten_mask) if atten_mask is not None else None
    compressed = mask is not None and sparse_mode in (2, 3, 4)
    if compressed:
        core.check_compressed_mask(OP, mask, sparse_mode)
    keep_prob = float(keep_prob)
    base_seed = core.dropout_seed() if keep_prob < 1 else 0

    if varlen:
        q_lens = _seq_lengths("actual_seq_qlen", actual_seq_qlen, Sq)
        kv_lens = _seq_lengths("actual_seq_kvlen", actual_seq_kvlen, Skv)
        require(len(q_lens) == len(kv_lens), OP,
                f"actual_seq_qlen and actual_seq_kvlen list different batch sizes ({len(q_lens)} vs {len(kv_lens)})")
        segments = list(zip(q_lens, kv_lens))
        if mask is not None and not compressed:
            mask = _mask_4d(mask, 1, N, max(q_lens), max(kv_lens), varlen=True)
    else:
        segments = [(Sq, Skv)]
        if mask is not None and not compressed:
            mask = _mask_4d(mask, B, N, Sq, Skv, varlen=False)
        if pse is not None:
            pse = _pse_4d(pse, B, N, Sq, Skv)

    outs, maxes, sums = [], [], []
    q0 = k0 = 0
    for i, (sq, skv) in enumerate(segments):
        problem = core.Problem(
            scale=float(scale),
            mask=None if mask is None or compressed else core.group_heads(mask[..., :sq, :skv], Nkv),
            band=None if mask is None else core.sparse_band(sparse_mode, pre_tockens, next_tockens, sq, skv),
            pse=core.group_heads(pse, Nkv),
            pse_scaled=True,
            keep_prob=keep_prob,
            seed=base_seed + 7919 * i,
            zero_dead_rows=inner_precise == 2 or sparse_mode == 3,
        )
        out, row_max, row_sum = core.attention(q[:, :, q0:q0 + sq], k[:, :, k0:k0 + skv], v[:, :, k0:k0 + skv], problem)
        outs.append(out)
        maxes.append(row_max)
        sums.append(row_sum)
        q0, k0 = q0 + sq, k0 + skv

    out = torch.cat(outs, dim=2) if len(outs) > 1 else outs[0]
    row_max = torch.cat(maxes, dim=2) if len(maxes) > 1 else maxes[0]
    row_sum = torch.cat(sums, dim=2) if len(sums) > 1 else sums[0]
    if varlen:
        attention_out = out[0].transpose(0, 1).contiguous()
        # [1, N, T] -> TND [T, N, 8] or the default NTD [N, T, 8]
        stats = lambda t: (t[0].transpose(0, 1) if softmax_layout == "TND" else t[0]).unsqueeze(-1).expand(  # noqa: E731
            -1, -1, 8).contiguous()
    else:
        attention_out = core.from_bnsd(out, layout)
        stats = lambda t: t.unsqueeze(-1).expand(-1, -1, -1, 8).contiguous()  # noqa: E731
    numels = N * sum(sq * skv for sq, skv in segments) * (B if not varlen else 1) if keep_prob < 1 else 0
    softmax_out = torch.empty(0, dtype=query.dtype, device=query.device)
    return attention_out, stats(row_max), stats(row_sum), softmax_out, base_seed, 0, numels
