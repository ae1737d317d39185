"""The inference attention ops, emulated: PFA, IFA and FIA (facts §2.3).

``npu_prompt_flash_attention`` (prefill), ``npu_incre_flash_attention`` (decode, Sq = 1) and
``npu_fused_infer_attention_score`` (prefill when Sq > 1, decode when Sq == 1) share one path,
:func:`_infer`, on top of the blocked core. Semantics as on the NPU:

* logits are ``scale * Q K^T + pse_shift`` (pse added after the scale), ``scale`` default 1.0;
* ``atten_mask`` bool/int8/uint8, True/1 = masked OUT; shapes (Sq, Skv), (B|1, Sq, Skv),
  (B|1, 1, Sq, Skv), and for decode (B, Skv); the last dim may be longer than Skv (the NPU asks
  for it padded with 1s), the other dims must match. ``pse_shift``: (B|1, N, Sq, Skv);
* sparse_mode 0-4 as in ``npu_fusion_attention`` (mode 0 band anchored top-left and ignored
  without a mask; 2/3/4 need the compressed 2048x2048 mask); **PFA's next_tokens defaults to 0**,
  so PFA with a mask and default tokens is causal;
* ``actual_seq_lengths`` (PFA/FIA: per-batch query lengths; IFA: per-batch KV lengths) and
  ``actual_seq_lengths_kv`` are per batch, NOT cumulative. Query rows past a batch's length come
  out as 0 (their lse too); causal modes anchor on the actual lengths;
* paged KV: ``block_table`` int32 [B, maxBlocks] and ``block_size``; key/value are then the
  block pools ``[num_blocks, block_size, Nkv*D]`` (the BSH-style cache the IFA/FIA docs describe,
  used for every query layout); batch b's keys are blocks ``block_table[b, :ceil(len/block_size)]``
  concatenated and cut to its KV length, which must be given;
* query fp16/bf16 only (the NPU kernels take fp16/bf16/int8; int8 quantisation, antiquant,
  shared prefixes, rope splits and TND layouts are not emulated and raise);
* no backward on an NPU: with grad-requiring inputs they raise.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from . import _attention_core as core
from ._checks import check_dtypes, check_same_dtype, dtype_name, reads_values, refuse_autograd, require
from .registry import npu_op

_HALF = (torch.float16, torch.bfloat16)
_LAYOUTS = ("BSH", "BSND", "BNSD", "BNSD_BSND")
_MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)
_MAX_D = 512
_MAX_HEADS = 256
_MAX_GROUP = 64


def _refuse_unsupported(op: str, **args) -> None:
    for name, value in args.items():
        require(value is None, op, f"{name} is not emulated (quantisation / prefix / rope-split inputs)")


def _query_bnsd(op, query, layout, num_heads):
    in_layout = "BNSD" if layout == "BNSD_BSND" else layout
    rank = 3 if in_layout == "BSH" else 4
    require(query.dim() == rank, op, f"query must be {rank}-D for input_layout={layout}, got shape {tuple(query.shape)}")
    if in_layout == "BSH":
        require(query.shape[2] % num_heads == 0, op, f"query hidden size {query.shape[2]} is not a multiple of num_heads={num_heads}")
    q = core.to_bnsd(query, in_layout, num_heads)
    require(q.shape[1] == num_heads, op, f"query has {q.shape[1]} heads but num_heads={num_heads}")
    return q, in_layout


def _kv_bnsd(op, name, t, in_layout, nkv, d):
    rank = 3 if in_layout == "BSH" else 4
    require(t.dim() == rank, op, f"{name} must be {rank}-D for input_layout={in_layout}, got shape {tuple(t.shape)}")
    if in_layout == "BSH":
        require(t.shape[2] == nkv * d, op,
                f"{name} hidden size {t.shape[2]} != num_key_value_heads ({nkv}) x head dim ({d}); "
                "set num_key_value_heads for GQA")
    out = core.to_bnsd(t, in_layout, nkv)
    require(out.shape[1] == nkv, op, f"{name} has {out.shape[1]} heads but num_key_value_heads resolves to {nkv}")
    require(out.shape[3] == d, op, f"{name} head dim {out.shape[3]} != query head dim {d}")
    return out


def _mask_4d(op, mask, B, sq, decode):
    """[B|1, 1, Sq, Skv'] bool from the shapes the inference ops accept."""
    m = core.bool_mask(op, mask, _MASK_DTYPES)
    shape = tuple(m.shape)
    if m.dim() == 2:
        m = m.view(shape[0], 1, 1, shape[1]) if decode else m.view(1, 1, *shape)
    elif m.dim() == 3:
        m = m.unsqueeze(1)
    require(m.dim() == 4 and m.shape[1] == 1 and m.shape[0] in (1, B) and m.shape[2] == sq, op,
            f"atten_mask shape {shape} is not one of (Sq, Skv), (B|1, Sq, Skv), (B|1, 1, Sq, Skv)"
            + (", (B, Skv)" if decode else "") + f" with B={B}, Sq={sq}")
    return m


def _pse_4d(op, pse, B, N, sq):
    shape = tuple(pse.shape)
    require(pse.dim() == 4 and pse.shape[0] in (1, B) and pse.shape[1] == N and pse.shape[2] == sq, op,
            f"pse_shift shape {shape} must be (B|1, N, Sq, Skv) with B={B}, N={N}, Sq={sq}")
    return pse


def _lengths(op, name, lengths, B, limit):
    if lengths is None:
        return None
    lengths = [int(n) for n in lengths]
    require(len(lengths) == B, op, f"{name} must give one length per batch ({B}), got {len(lengths)}")
    require(all(0 <= n <= limit for n in lengths), op,
            f"{name} are per-batch lengths (not cumulative) in [0, {limit}], got {lengths}")
    return lengths


def _paged(op, cache, table, b, length, block_size, nkv, d):
    """Batch b's first ``length`` keys (or values) from a paged pool, as [1, Nkv, length, D]."""
    n = core.ceil_div(length, block_size)
    require(n <= table.shape[1], op, f"batch {b} needs {n} blocks but block_table has {table.shape[1]} columns")
    ids = table[b, :n].long()
    require(bool(((ids >= 0) & (ids < cache.shape[0])).all()), op,
            f"block_table[{b}] refers to blocks outside the pool of {cache.shape[0]}")
    rows = cache.index_select(0, ids).reshape(n * block_size, nkv, d)[:length]
    return rows.permute(1, 0, 2).unsqueeze(0)


def _infer(op: str, query, key, value, *, atten_mask, pse_shift, actual_q: Optional[Sequence[int]],
           actual_kv: Optional[Sequence[int]], block_table, block_size: int, num_heads: int,
           num_kv_heads: int, scale: float, pre: int, next_: int, layout: str, sparse_mode: int,
           zero_dead_rows: bool, decode: bool, paged_block_rule):
    """The shared inference path; returns (out in the output layout, lse [B, N, Sq] f32)."""
    refuse_autograd(op, query, key, value, pse_shift)
    check_dtypes(op, _HALF, query=query, key=key, value=value, pse_shift=pse_shift)
    check_same_dtype(op, query=query, key=key, value=value, pse_shift=pse_shift)
    layout = str(layout).upper()
    require(layout in _LAYOUTS, op, f"input_layout must be one of {', '.join(_LAYOUTS)} (others are not emulated), got {layout!r}")
    require(1 <= num_heads <= _MAX_HEADS, op, f"num_heads must be in [1, {_MAX_HEADS}], got {num_heads}")
    nkv = num_kv_heads or num_heads
    require(num_heads % nkv == 0 and num_heads // nkv <= _MAX_GROUP, op,
            f"num_heads ({num_heads}) must be a multiple of num_key_value_heads ({nkv}), at most {_MAX_GROUP}x")
    require(sparse_mode in (0, 1, 2, 3, 4), op, f"sparse_mode={sparse_mode} is not emulated; use 0-4")

    q, in_layout = _query_bnsd(op, query, layout, num_heads)
    B, N, Sq, D = q.shape
    require(1 <= D <= _MAX_D, op, f"head dim D must be in [1, {_MAX_D}], got {D}")
    require(not decode or Sq == 1, op, f"decode attention takes one query token per batch, got Sq={Sq}")
    require(tuple(key.shape) == tuple(value.shape), op, f"key and value shapes differ: {tuple(key.shape)} vs {tuple(value.shape)}")
    if block_table is None:
        k = _kv_bnsd(op, "key", key, in_layout, nkv, D)
        v = _kv_bnsd(op, "value", value, in_layout, nkv, D)
        require(k.shape[0] == B, op, f"key batch {k.shape[0]} != query batch {B}")
        max_kv = k.shape[2]
    else:
        require(block_table.dtype == torch.int32 and block_table.dim() == 2 and block_table.shape[0] == B, op,
                f"block_table must be int32 [B={B}, maxBlocks], got {dtype_name(block_table.dtype)} {tuple(block_table.shape)}")
        require(key.dim() == 3 and key.shape[1] == block_size and key.shape[2] == nkv * D, op,
                f"paged key/value must be [num_blocks, block_size={block_size}, Nkv*D={nkv * D}], got {tuple(key.shape)}")
        paged_block_rule(block_size)
        require(actual_kv is not None, op, "paged attention (block_table) needs the per-batch KV lengths")
        max_kv = block_table.shape[1] * block_size

    q_lens = _lengths(op, "query lengths", actual_q, B, Sq)
    kv_lens = _lengths(op, "KV lengths", actual_kv, B, max_kv)

    mask = None
    if atten_mask is not None:
        if sparse_mode in (2, 3, 4):
            check = core.check_compressed_mask if reads_values() else core.check_compressed_mask_shape
            check(op, core.bool_mask(op, atten_mask, _MASK_DTYPES), sparse_mode)
        else:
            mask = _mask_4d(op, atten_mask, B, Sq, decode)
            need = max(kv_lens) if kv_lens else max_kv
            require(mask.shape[3] >= need, op, f"atten_mask covers {mask.shape[3]} keys, fewer than the {need} attended")
    else:
        require(sparse_mode in (0, 1), op, f"sparse_mode={sparse_mode} needs the compressed 2048x2048 atten_mask")
    if pse_shift is not None:
        pse_shift = _pse_4d(op, pse_shift, B, N, Sq)
        need = max(kv_lens) if kv_lens else max_kv
        require(pse_shift.shape[3] >= need, op, f"pse_shift covers {pse_shift.shape[3]} keys, fewer than the {need} attended")

    out_layout = "BSND" if layout == "BNSD_BSND" else in_layout
    if not reads_values():  # the fake implementation: shapes are known here, the rest reads data
        return core.from_bnsd(q.new_empty(B, N, Sq, D), out_layout), q.new_empty(B, N, Sq, dtype=torch.float32)

    def problem(b, sq, skv):
        """The core problem for batch b (None: all batches) with sq queries and skv keys."""
        def cut(t):
            if t is None:
                return None
            rows = slice(None) if b is None or t.shape[0] == 1 else slice(b, b + 1)
            return core.group_heads(t[rows, :, :sq, :skv], nkv)

        return core.Problem(
            scale=float(scale),
            mask=cut(mask),
            band=core.sparse_band(sparse_mode, pre, next_, sq, skv) if atten_mask is not None else None,
            pse=cut(pse_shift),
            pse_scaled=False,
            zero_dead_rows=zero_dead_rows,
        )

    if block_table is None and q_lens is None and kv_lens is None:
        out, row_max, row_sum = core.attention(q, k, v, problem(None, Sq, max_kv))
        lse = core.lse_of(row_max, row_sum)
    else:
        out = q.new_zeros(B, N, Sq, D)
        lse = torch.zeros(B, N, Sq, dtype=torch.float32, device=q.device)
        for b in range(B):
            sq = Sq if q_lens is None else q_lens[b]
            skv = max_kv if kv_lens is None else kv_lens[b]
            if block_table is None:
                kb, vb = k[b:b + 1, :, :skv], v[b:b + 1, :, :skv]
            else:
                kb = _paged(op, key, block_table, b, skv, block_size, nkv, D)
                vb = _paged(op, value, block_table, b, skv, block_size, nkv, D)
            ob, mb, sb = core.attention(q[b:b + 1, :, :sq], kb, vb, problem(b, sq, skv))
            out[b, :, :sq] = ob[0]
            lse[b, :, :sq] = core.lse_of(mb, sb)[0]
    return core.from_bnsd(out, out_layout), lse


def _prefill_block_rule(op):
    def rule(block_size):
        require(128 <= block_size <= 512 and block_size % 128 == 0, op,
                f"block_size must be a multiple of 128 in [128, 512] for prefill, got {block_size}")
    return rule


def _decode_block_rule(op):
    def rule(block_size):
        require(block_size > 0 and block_size % 16 == 0, op, f"block_size must be a positive multiple of 16 (fp16/bf16), got {block_size}")
    return rule


@npu_op
def npu_prompt_flash_attention(query, key, value, *, padding_mask=None, atten_mask=None, pse_shift=None,
                               actual_seq_lengths=None, deq_scale1=None, quant_scale1=None, deq_scale2=None,
                               quant_scale2=None, quant_offset2=None, num_heads=1, scale_value=1.0,
                               pre_tokens=2147483647, next_tokens=0, input_layout="BSH",
                               num_key_value_heads=0, actual_seq_lengths_kv=None, sparse_mode=0):
    op = "npu_prompt_flash_attention"
    require(padding_mask is None, op, "padding_mask is not supported; use atten_mask")
    _refuse_unsupported(op, deq_scale1=deq_scale1, quant_scale1=quant_scale1, deq_scale2=deq_scale2,
                        quant_scale2=quant_scale2, quant_offset2=quant_offset2)
    out, _ = _infer(op, query, key, value, atten_mask=atten_mask, pse_shift=pse_shift,
                    actual_q=actual_seq_lengths, actual_kv=actual_seq_lengths_kv, block_table=None,
                    block_size=0, num_heads=num_heads, num_kv_heads=num_key_value_heads, scale=scale_value,
                    pre=pre_tokens, next_=next_tokens, layout=input_layout, sparse_mode=sparse_mode,
                    zero_dead_rows=False, decode=False, paged_block_rule=None)
    return out


@npu_op
def npu_incre_flash_attention(query, key, value, *, padding_mask=None, atten_mask=None, pse_shift=None,
                              actual_seq_lengths=None, antiquant_scale=None, antiquant_offset=None,
                              block_table=None, dequant_scale1=None, quant_scale1=None, dequant_scale2=None,
                              quant_scale2=None, quant_offset2=None, kv_padding_size=None, num_heads=1,
                              scale_value=1.0, input_layout="BSH", num_key_value_heads=0, block_size=0,
                              inner_precise=1):
    """``inner_precise`` 0 (high precision) / 1 (high performance) compute the same here."""
    op = "npu_incre_flash_attention"
    require(padding_mask is None, op, "padding_mask is not supported; use atten_mask")
    _refuse_unsupported(op, antiquant_scale=antiquant_scale, antiquant_offset=antiquant_offset,
                        dequant_scale1=dequant_scale1, quant_scale1=quant_scale1, dequant_scale2=dequant_scale2,
                        quant_scale2=quant_scale2, quant_offset2=quant_offset2, kv_padding_size=kv_padding_size)
    require(inner_precise in (0, 1), op, f"inner_precise must be 0 or 1, got {inner_precise}")
    out, _ = _infer(op, query, key, value, atten_mask=atten_mask, pse_shift=pse_shift, actual_q=None,
                    actual_kv=actual_seq_lengths, block_table=block_table, block_size=block_size,
                    num_heads=num_heads, num_kv_heads=num_key_value_heads, scale=scale_value,
                    pre=core.INT_MAX, next_=core.INT_MAX, layout=input_layout, sparse_mode=0,
                    zero_dead_rows=False, decode=True, paged_block_rule=_decode_block_rule(op))
    return out


@npu_op
def npu_fused_infer_attention_score(query, key, value, *, pse_shift=None, atten_mask=None, actual_seq_lengths=None,
                                    actual_seq_lengths_kv=None, dequant_scale1=None, quant_scale1=None,
                                    dequant_scale2=None, quant_scale2=None, quant_offset2=None, antiquant_scale=None,
                                    antiquant_offset=None, key_antiquant_scale=None, key_antiquant_offset=None,
                                    value_antiquant_scale=None, value_antiquant_offset=None, block_table=None,
                                    query_padding_size=None, kv_padding_size=None, key_shared_prefix=None,
                                    value_shared_prefix=None, actual_shared_prefix_len=None, query_rope=None,
                                    key_rope=None, key_rope_antiquant_scale=None, num_heads=1, scale=1.0,
                                    pre_tokens=2147483647, next_tokens=2147483647, input_layout="BSH",
                                    num_key_value_heads=0, sparse_mode=0, inner_precise=0, block_size=0,
                                    antiquant_mode=0, key_antiquant_mode=0, value_antiquant_mode=0,
                                    softmax_lse_flag=False):
    """Prefill when Sq > 1, decode when Sq == 1. ``inner_precise`` bit 1 zeroes fully masked rows.

    Returns ``(attention_out, softmax_lse)``: lse is [B, N, Sq, 1] float32 with
    ``softmax_lse_flag=True``, else a [1] float32 zero tensor.
    """
    op = "npu_fused_infer_attention_score"
    _refuse_unsupported(op, dequant_scale1=dequant_scale1, quant_scale1=quant_scale1, dequant_scale2=dequant_scale2,
                        quant_scale2=quant_scale2, quant_offset2=quant_offset2, antiquant_scale=antiquant_scale,
                        antiquant_offset=antiquant_offset, key_antiquant_scale=key_antiquant_scale,
                        key_antiquant_offset=key_antiquant_offset, value_antiquant_scale=value_antiquant_scale,
                        value_antiquant_offset=value_antiquant_offset, query_padding_size=query_padding_size,
                        kv_padding_size=kv_padding_size, key_shared_prefix=key_shared_prefix,
                        value_shared_prefix=value_shared_prefix, actual_shared_prefix_len=actual_shared_prefix_len,
                        query_rope=query_rope, key_rope=key_rope, key_rope_antiquant_scale=key_rope_antiquant_scale)
    require(inner_precise in (0, 1, 2, 3), op, f"inner_precise must be 0-3, got {inner_precise}")
    in_layout = str(input_layout).upper()
    seq_axis = {"BSH": 1, "BSND": 1}.get(in_layout, 2)
    require(query.dim() > seq_axis, op, f"query shape {tuple(query.shape)} does not fit input_layout={input_layout}")
    decode = query.shape[seq_axis] == 1
    head_dim = query.shape[-1] // max(num_heads, 1) if in_layout == "BSH" else query.shape[-1]
    require(decode or head_dim % 16 == 0, op, f"head dim must be a multiple of 16 for prefill (fp16/bf16), got {head_dim}")
    out, lse = _infer(op, query, key, value, atten_mask=atten_mask, pse_shift=pse_shift,
                      actual_q=None if decode else actual_seq_lengths, actual_kv=actual_seq_lengths_kv,
                      block_table=block_table, block_size=block_size, num_heads=num_heads,
                      num_kv_heads=num_key_value_heads, scale=scale, pre=pre_tokens, next_=next_tokens,
                      layout=input_layout, sparse_mode=sparse_mode, zero_dead_rows=bool(inner_precise & 2),
                      decode=decode, paged_block_rule=(_decode_block_rule if decode else _prefill_block_rule)(op))
    if softmax_lse_flag:
        return out, lse.unsqueeze(-1)
    return out, torch.zeros(1, dtype=torch.float32, device=query.device)

