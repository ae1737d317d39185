"""``npu_fusion_attention`` and ``npu_fusion_attention_grad``: torch_npu's training FlashAttention
and its backward, emulated (facts §2.1, §2.2).

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
* Where the call is exactly an SDPA call (no pse, no dropout, masks SDPA expresses), the forward runs torch's fused SDPA kernel: ``kernels._fusion_attention_sdpa``, which
  says what maps, and why its softmax statistics come in log-sum-exp form (max = lse, sum = 1).
* Differentiable in query/key/value (``NpuFusionAttention``): the backward is
  ``npu_fusion_attention_grad`` fed with the forward's softmax_max / softmax_sum / output and its
  dropout seed, as on the NPU; pse gets no gradient (the grad op's dpse comes back empty, meta).
* Traced (torch.compile, FakeTensor): the seed/offset outputs are the constants 0 (meta), so a
  traced backward could not replay a dropout mask; tracing a dropout call for training raises.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake

from . import _attention_core as core
from . import _fusion_attention_sdpa as sdpa
from ._checks import NpuOpError, require
from ._fusion_attention_args import OP, FaCall, as_bnsd, prepare
from .registry import Derivative, npu_op

#: the non-tensor arguments of npu_fusion_attention that npu_fusion_attention_grad takes again
_PASSED_TO_GRAD = ("padding_mask", "keep_prob", "pre_tockens", "next_tockens", "inner_precise", "prefix",
                   "actual_seq_qlen", "actual_seq_kvlen", "sparse_mode", "gen_mask_parallel", "sync", "softmax_layout",
                   "sink")


def _join(parts):
    """Per-sequence [B, N, S_i, *] results side by side along S."""
    return torch.cat(parts, dim=2) if len(parts) > 1 else parts[0]


def _forward(call: FaCall, base_seed: int):
    how = sdpa.plan(call)
    if how is not None:
        out, row_max, row_sum = sdpa.attention(call, how)
        return call.to_layout(out), call.stats_out(row_max), call.stats_out(row_sum)
    outs, maxes, sums = [], [], []
    for i, (sq, skv), rows, keys in call.slices():
        out, row_max, row_sum = core.attention(call.q[:, :, rows], call.k[:, :, keys], call.v[:, :, keys],
                                               call.problem(i, sq, skv, base_seed))
        outs.append(out)
        maxes.append(row_max)
        sums.append(row_sum)
    return call.to_layout(_join(outs)), call.stats_out(_join(maxes)), call.stats_out(_join(sums))


def _save(ctx, args, outputs):
    out, softmax_max, softmax_sum, softmax_out, seed, offset, numels = outputs
    if args["keep_prob"] < 1 and is_fake(out):
        raise NpuOpError(
            f"{OP} with dropout (keep_prob < 1) cannot be traced for training: its dropout seed is a Python int "
            "output (schema `int`), so a traced backward would replay a constant instead of the forward's mask. "
            "Compile with keep_prob=1, or keep this call out of the compiled region (torch.compiler.disable)")
    ctx.mark_non_differentiable(softmax_max, softmax_sum, softmax_out)
    ctx.save_for_backward(args["query"], args["key"], args["value"], args["pse"], args["atten_mask"], out,
                          softmax_max, softmax_sum)
    ctx.kwargs = {name: args[name] for name in _PASSED_TO_GRAD}
    ctx.kwargs.update(scale_value=args["scale"], seed=seed, offset=offset, numels=numels)
    ctx.head_num, ctx.layout = args["head_num"], args["input_layout"]


def _grads(ctx, dy, *_unused):
    query, key, value, pse, atten_mask, out, softmax_max, softmax_sum = ctx.saved_tensors
    dq, dk, dv, _, _ = torch.ops.npu.npu_fusion_attention_grad(
        query, key, value, dy, ctx.head_num, ctx.layout, pse=pse, atten_mask=atten_mask, softmax_max=softmax_max,
        softmax_sum=softmax_sum, attention_in=out, **ctx.kwargs)
    return {"query": dq, "key": dk, "value": dv}


def _fake(query, key, value, head_num, input_layout, pse=None, padding_mask=None, atten_mask=None, scale=1.,
          keep_prob=1., pre_tockens=2147483647, next_tockens=2147483647, inner_precise=0, prefix=None,
          actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True, sync=False,
          softmax_layout="", sink=None, dropout_mask=None, seed=0, offset=0):
    """Output shapes and dtypes (the checks that read no tensor values run too). seed and offset
    are 0, as in torch_npu's meta registration: the schema returns Python ints, which a traced graph
    holds as constants (the real seed of a dropout call exists only at run time)."""
    call = prepare(query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale, keep_prob,
                   pre_tockens, next_tockens, inner_precise, actual_seq_qlen, actual_seq_kvlen, sparse_mode,
                   softmax_layout, sink, dropout_mask, values=False)
    B, N, S, _ = call.q.shape
    out = call.to_layout(query.new_empty(B, N, S, call.v.shape[3]))
    stats = call.stats_shape()
    return (out, query.new_empty(stats, dtype=torch.float32), query.new_empty(stats, dtype=torch.float32),
            query.new_empty(0), 0, 0, call.numels())


@npu_op(fake=_fake, derivative=Derivative(_save, _grads))
def npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None,
                         atten_mask=None, scale=1., keep_prob=1., pre_tockens=2147483647,
                         next_tockens=2147483647, inner_precise=0, prefix=None, actual_seq_qlen=None,
                         actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True, sync=False,
                         softmax_layout="", sink=None, dropout_mask=None, seed=0, offset=0):
    """The 7-tuple ``(attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels)``
    (facts §2.1 outputs): attention_out in the query layout with D replaced by Dv and query's
    dtype; the statistics float32 [B, N, Sq, 8] (TND: see above); softmax_out empty."""
    call = prepare(query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale, keep_prob,
                   pre_tockens, next_tockens, inner_precise, actual_seq_qlen, actual_seq_kvlen, sparse_mode,
                   softmax_layout, sink, dropout_mask)
    base_seed = core.dropout_seed() if call.keep_prob < 1 else 0
    out, softmax_max, softmax_sum = _forward(call, base_seed)
    softmax_out = torch.empty(0, dtype=query.dtype, device=query.device)
    return out, softmax_max, softmax_sum, softmax_out, base_seed, 0, call.numels()


def _grad_fake(query, key, value, dy, head_num, input_layout, *, pse=None, padding_mask=None, atten_mask=None,
               softmax_max=None, softmax_sum=None, softmax_in=None, attention_in=None, scale_value=1., keep_prob=1.,
               pre_tockens=2147483647, next_tockens=2147483647, inner_precise=0, seed=0, offset=0, numels=0,
               prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True,
               sync=False, softmax_layout="", sink=None):
    prepare(query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale_value, keep_prob,
            pre_tockens, next_tockens, inner_precise, actual_seq_qlen, actual_seq_kvlen, sparse_mode,
            softmax_layout, sink, None, values=False)
    return (query.new_empty(query.shape), key.new_empty(key.shape, dtype=query.dtype),
            value.new_empty(value.shape, dtype=query.dtype), query.new_empty(0), query.new_zeros(()))


@npu_op(fake=_grad_fake)
def npu_fusion_attention_grad(query, key, value, dy, head_num, input_layout, *, pse=None, padding_mask=None,
                              atten_mask=None, softmax_max=None, softmax_sum=None, softmax_in=None,
                              attention_in=None, scale_value=1., keep_prob=1., pre_tockens=2147483647,
                              next_tockens=2147483647, inner_precise=0, seed=0, offset=0, numels=0, prefix=None,
                              actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True,
                              sync=False, softmax_layout="", sink=None):
    """``(dq, dk, dv, dpse, dsink)`` of ``npu_fusion_attention`` (facts §2.2; meta: dq/dk/dv shaped
    like query/key/value in query's dtype, dpse empty [0], dsink [] without a sink).

    ``softmax_max`` / ``softmax_sum`` / ``attention_in`` are the forward's statistics and output
    (recomputed when not given); ``seed`` is the forward's dropout seed, so the same keep-mask is
    replayed. The scale is named ``scale_value`` here; ``softmax_in``, ``offset``, ``numels``,
    ``gen_mask_parallel`` and ``sync`` steer the real mask generator and are ignored.
    """
    call = prepare(query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale_value, keep_prob,
                   pre_tockens, next_tockens, inner_precise, actual_seq_qlen, actual_seq_kvlen, sparse_mode,
                   softmax_layout, sink, None)
    if softmax_max is None or softmax_sum is None or attention_in is None:
        with torch.no_grad():
            attention_in, softmax_max, softmax_sum = _forward(call, seed)
    out = as_bnsd("attention_in", attention_in, call.layout, heads=call.q.shape[1])
    dout = as_bnsd("dy", dy, call.layout, heads=call.q.shape[1])
    require(out.shape == dout.shape == call.q.shape[:3] + (call.v.shape[3],), OP,
            f"dy and attention_in must be shaped like the attention output, got {tuple(dy.shape)} and "
            f"{tuple(attention_in.shape)}")
    row_max, row_sum = call.stats_in(softmax_max), call.stats_in(softmax_sum)
    dqs, dks, dvs = [], [], []
    for i, (sq, skv), rows, keys in call.slices():
        grads = core.attention_backward(call.q[:, :, rows], call.k[:, :, keys], call.v[:, :, keys], out[:, :, rows],
                                        dout[:, :, rows], row_max[..., rows], row_sum[..., rows],
                                        call.problem(i, sq, skv, seed))
        for part, grad in zip((dqs, dks, dvs), grads):
            part.append(grad)
    dq, dk, dv = (call.to_layout(_join(ts)).to(query.dtype) for ts in (dqs, dks, dvs))
    return dq, dk, dv, query.new_empty(0), query.new_zeros(())  # no dpse; dsink 0 without a sink
