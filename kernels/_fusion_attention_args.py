"""The validated arguments of one ``npu_fusion_attention`` (or ``_grad``) call.

``prepare`` checks everything the real op checks about shapes, dtypes, layouts and modes, views
query/key/value as BNSD, and resolves the per-sequence segments (TND), the mask and pse into an
``FaCall`` that the forward, the backward and the fake (shape-only) implementation share.
``values=False`` skips the one check that reads tensor values (the compressed mask), so that the
fake implementation can run on FakeTensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch

from . import _attention_core as core
from ._checks import NpuOpError, check_dtypes, check_same_dtype, require
from ._common import FLOATS

OP = "npu_fusion_attention"
LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")
_MAX_D = 768
_MAX_HEADS = 256
_MAX_VARLEN_BATCH = 2048


def as_bnsd(name: str, t: torch.Tensor, layout: str, head_dim: int = 0, heads: int = 0) -> torch.Tensor:
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


def seq_lengths(name: str, cum, total: int) -> list:
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


@dataclass
class FaCall:
    """One validated call: BNSD views (TND: [1, N, T, D]) and what each segment's problem needs."""

    layout: str
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    segments: List[Tuple[int, int]]  # (Sq, Skv) per sequence; one for the non-varlen layouts
    mask: Optional[torch.Tensor]     # 4-D bool, None for no mask or a compressed one
    compressed: bool
    pse: Optional[torch.Tensor]
    scale: float
    keep_prob: float
    pre: int
    next: int
    sparse_mode: int
    zero_dead_rows: bool
    softmax_layout: str

    @property
    def varlen(self) -> bool:
        return self.layout == "TND"

    def problem(self, i: int, sq: int, skv: int, base_seed: int) -> core.Problem:
        nkv = self.k.shape[1]
        return core.Problem(
            scale=self.scale,
            mask=None if self.mask is None else core.group_heads(self.mask[..., :sq, :skv], nkv),
            band=None if self.mask is None and not self.compressed
            else core.sparse_band(self.sparse_mode, self.pre, self.next, sq, skv),
            pse=core.group_heads(self.pse, nkv),
            pse_scaled=True,
            keep_prob=self.keep_prob,
            seed=base_seed + 7919 * i,
            zero_dead_rows=self.zero_dead_rows,
        )

    def slices(self):
        """(index, (Sq, Skv), query rows, key rows) per segment."""
        q0 = k0 = 0
        for i, (sq, skv) in enumerate(self.segments):
            yield i, (sq, skv), slice(q0, q0 + sq), slice(k0, k0 + skv)
            q0, k0 = q0 + sq, k0 + skv

    def numels(self) -> int:
        """Elements of the dropout mask (0 without dropout)."""
        if self.keep_prob >= 1:
            return 0
        batch = 1 if self.varlen else self.q.shape[0]
        return self.q.shape[1] * batch * sum(sq * skv for sq, skv in self.segments)

    def stats_shape(self) -> Tuple[int, ...]:
        B, N, S, _ = self.q.shape
        if not self.varlen:
            return (B, N, S, 8)
        return (S, N, 8) if self.softmax_layout == "TND" else (N, S, 8)

    def stats_out(self, t: torch.Tensor) -> torch.Tensor:
        """[B, N, S] float32 row statistics -> the returned layout (8 replicated values)."""
        if self.varlen:
            t = t[0].transpose(0, 1) if self.softmax_layout == "TND" else t[0]
        return t.unsqueeze(-1).expand(*t.shape, 8).contiguous()

    def stats_in(self, t: torch.Tensor) -> torch.Tensor:
        """The inverse of ``stats_out``: a returned statistic -> [B, N, S] float32."""
        t = t[..., 0].float()
        if self.varlen:
            t = (t.transpose(0, 1) if self.softmax_layout == "TND" else t).unsqueeze(0)
        return t

    def to_layout(self, out: torch.Tensor) -> torch.Tensor:
        """A [B, N, S, D] result -> the input layout (TND from [1, N, T, D])."""
        if self.varlen:
            return out[0].transpose(0, 1).contiguous()
        return core.from_bnsd(out, self.layout)


def prepare(query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale, keep_prob,
            pre_tockens, next_tockens, inner_precise, actual_seq_qlen, actual_seq_kvlen, sparse_mode,
            softmax_layout, sink, dropout_mask, values: bool = True) -> FaCall:
    layout = _check_args(query, key, value, pse, padding_mask, atten_mask, keep_prob, inner_precise,
                         sparse_mode, softmax_layout, sink, dropout_mask, input_layout)
    varlen = layout == "TND"
    require(varlen or (actual_seq_qlen is None and actual_seq_kvlen is None), OP,
            "actual_seq_qlen/actual_seq_kvlen are only used with input_layout=TND")
    require(not (varlen and pse is not None), OP, "pse with input_layout=TND is not emulated")
    require(1 <= head_num <= _MAX_HEADS, OP, f"head_num must be in [1, {_MAX_HEADS}], got {head_num}")
    q = as_bnsd("query", query, layout, heads=head_num)
    k = as_bnsd("key", key, layout, head_dim=q.shape[3])
    v = as_bnsd("value", value, layout, heads=k.shape[1])  # BSH value: Nkv heads of Dv <= D
    _check_shapes(q, k, v, head_num)
    B, N, Sq, _ = q.shape
    Skv = k.shape[2]

    mask = core.bool_mask(OP, atten_mask) if atten_mask is not None else None
    compressed = mask is not None and sparse_mode in (2, 3, 4)
    if compressed and values:
        core.check_compressed_mask(OP, mask, sparse_mode)
    elif compressed:
        core.check_compressed_mask_shape(OP, mask, sparse_mode)
    if varlen:
        q_lens = seq_lengths("actual_seq_qlen", actual_seq_qlen, Sq)
        kv_lens = seq_lengths("actual_seq_kvlen", actual_seq_kvlen, Skv)
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
    return FaCall(layout=layout, q=q, k=k, v=v, segments=segments, mask=None if compressed else mask,
                  compressed=compressed, pse=pse, scale=float(scale), keep_prob=float(keep_prob),
                  pre=pre_tockens, next=next_tockens, sparse_mode=sparse_mode,
                  zero_dead_rows=inner_precise == 2 or sparse_mode == 3, softmax_layout=softmax_layout)
