"""Attention in the dataflow view: ``softmax(scale · q kᵀ + masks) v`` in any spelling.

``match(view, out)`` reads the value ``out`` (a ``matmul``) back to its operands::

    out = matmul(P, v)                    P: softmax(S, dim=-1) with casts and one dropout around it
    S   = scale · matmul(q, transposed(k))  with masks applied in any order: ``S + M``,
          ``S.masked_fill(C, -inf)``, ``where(C, S, -inf)``, each optionally under ``if M is not None``
          (a ``phi`` of the view), casts looked through; the scale may be on q instead

Spellings (``@``/``matmul``/``bmm``/``einsum``, ``transpose``/``mT``/``permute``, ``softmax`` as
function, method or ``nn.Softmax`` attribute, ``div``/``mul``, chained methods, one-expression
returns) are the view's business, so they need nothing here. GQA by ``repeat_kv``/
``repeat_interleave`` is read back to the K/V with fewer heads, which the kernel takes natively.

The result is an ``Attention`` (what the fused call needs, as values) or a ``Refusal`` (why the
kernel cannot express it, with a plan), or None when ``out`` is not attention at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import libcst as cst

from ._blockers import BIAS_NAME, baddbmm_scores, fallback_pse
from ._pieces import (built_as_mask, is_none_test, label_of, leads_to_softmax, mentions, optional_head_mask,
                      soft_caps, softmax_below, very_negative)
from ...refusal import Refusal, blocked
from ...view.values import number, reaches, same_value
from ...view.syntax import code
from ...view import Value
from ....opmap import plan
from ...view.ops import Op

UNDERFLOW_PLAN = plan("attention.underflow")
SOFTCAP_PLAN = plan("attention.softcap")
SINKS_PLAN = plan("attention.sinks")
EINSUM_PLAN = plan("attention.einsum")
MERGED_PLAN = plan("attention.merged_heads")
HEAD_MASK_PLAN = plan("attention.head_mask")
CONCAT_PLAN = plan("attention.concatenated_scores")
MOVED_PROBS_PLAN = plan("attention.probabilities_changed")
ZEROED_PLAN = plan("attention.zeroed_rows")


@dataclass
class Term:
    kind: str  # "additive" (S + M), "masked" (masked_fill(C, -inf): True = masked out), "keep" (where(C, S, -inf))
    value: Value
    condition: Optional[Value] = None  # the `if` test under which it applies


@dataclass
class Attention:
    out: Value
    q: Value
    k: Value
    v: Value
    scale: Optional[Value] = None
    inverse: bool = False  # the scores are divided by ``scale``
    terms: List[Term] = field(default_factory=list)
    softmax: Optional[Value] = None
    probabilities: List[Value] = field(default_factory=list)  # softmax output and what is derived from it
    dropout: Optional[Value] = None
    value_cast: bool = False  # P is cast to v's dtype: run the kernel in q's dtype, cast back
    repeated: Optional[Tuple[Value, Value]] = None  # (k, v) as repeated for the heads, when GQA was read back
    merged_heads: bool = False  # the scores were reshaped (3-D products with heads merged into the batch)
    unless: List[Value] = field(default_factory=list)  # `X is not None` tests under which the code applies
    zeroed: Optional[Value] = None  # ``probs.masked_fill(C, 0)`` after the softmax: C, the scores' own mask
    #                   what the kernel has no form for (a head mask, a soft-cap): fused only when X is None


def _peel_casts(value: Value) -> Tuple[Value, List[Value]]:
    casts = []
    while value is not None and value.op in (Op.CAST, Op.SAME):
        casts.append(value)
        value = value.input
    return value, casts


def _softmax_dim_is_last(softmax: Value) -> bool:
    dim = softmax["dim"]
    return dim is not None and number(dim) in (-1, 3)


def is_scores(value: Value, depth: int = 12) -> bool:
    """Whether ``value`` is (a masked, scaled, cast form of) ``q @ kᵀ``."""
    for _ in range(depth):
        if value is None:
            return False
        if value.op == Op.MATMUL:
            return True
        if value.op in (Op.CAST, Op.SAME, Op.MASKED_FILL, Op.TANH, Op.BADDBMM, Op.EINSUM, Op.RESHAPE):
            value = value.input if value.op not in (Op.BADDBMM, Op.EINSUM) else None
            if value is None:
                return True
            continue
        if value.op == Op.WHERE:
            value = value.input
            continue
        if value.op == Op.PHI:
            value = value["else"]
            continue
        if value.op in (Op.ADD, Op.SUB, Op.MUL, Op.DIV):
            left, right = value.input, value["other"]
            value = left if is_scores(left, 4) else right
            continue
        return False
    return False




class _Reader:
    def __init__(self, out: Value) -> None:
        self.out = out
        self.found = Attention(out, None, None, None)
        self.why = None  # (the softmax, where to point, why) when P @ V was not read back to its softmax

    # -- P @ V --------------------------------------------------------------------------------
    def read(self):
        probs, v = self.out.input, self.out["other"]
        if probs is None or v is None:
            return None
        found = self.found
        while probs is not None and probs.op in (Op.CAST, Op.SAME, Op.DROPOUT, Op.MUL, Op.PHI, Op.GETITEM, Op.MASKED_FILL):
            if probs.op == Op.MASKED_FILL:  # rows with every key masked zeroed: the kernel's output, zeroed there
                if found.zeroed is not None or number(probs["value"]) != 0 or probs["mask"] is None:
                    return self._stopped(probs)
                found.zeroed = probs["mask"]
                found.probabilities.append(probs)
                probs = probs.input
                continue
            if probs.op == Op.GETITEM:  # probs[..., :-1] after a softmax over [scores | sinks]
                inner = probs.input
                if inner is not None and inner.op == Op.SOFTMAX and inner.input is not None and inner.input.op == Op.CAT:
                    found.softmax = inner
                    return blocked(inner.input.node, "attention sinks (an extra logit column concatenated to the "
                                                     "scores)", SINKS_PLAN)
                return None
            if probs.op == Op.PHI:  # if head_mask is not None: probs = probs * head_mask
                plain = optional_head_mask(probs)
                if plain is None:
                    return self._stopped(probs)
                found.unless.append(probs["test"])
                found.probabilities.append(probs)
                probs = plain
                continue
            if probs.op == Op.MUL:
                left, right = probs.input, probs["other"]
                if leads_to_softmax(left) or leads_to_softmax(right):
                    found.softmax = softmax_below(left) or softmax_below(right)
                    return blocked(probs.node, "the attention probabilities are multiplied by a head mask", HEAD_MASK_PLAN)
                return None
            if probs.op == Op.DROPOUT:
                if found.dropout is not None:
                    return None
                found.dropout = probs
            elif probs.op == Op.CAST and mentions(probs["dtype"] or probs["other"], v):
                found.value_cast = True
            found.probabilities.append(probs)
            probs = probs.input
        if probs is None or probs.op != Op.SOFTMAX or not _softmax_dim_is_last(probs):
            return self._stopped(probs)
        found.softmax = probs  # set before the scores are read: a blocked site consumed it too
        found.probabilities.append(probs)
        found.v = v
        result = self.scores(probs.input)
        if isinstance(result, Attention) and found.zeroed is not None and not _zeroes_dead_rows(found):
            label = label_of(found.zeroed)
            mask = f"`{label}`" if label else "a mask"
            return blocked(found.probabilities[0].node, f"the probabilities are zeroed where {mask} holds after the "
                                                        "softmax, which is not the mask of the scores alone (the "
                                                        "kernel does not renormalise)", ZEROED_PLAN)
        return result

    def _unread(self, why: str):
        """None, after recording in ``self.why`` why the scores of the softmax were not read (when they
        are q·kᵀ scores: a softmax over anything else is not attention)."""
        softmax = self.found.softmax
        if has_transposed_product(softmax.input, 16):
            self.why = (softmax, softmax.node, why)
        return None

    def _stopped(self, probs: Optional[Value]):
        """None, after recording in ``self.why`` why the walk from V back to the softmax stopped at
        ``probs`` when a softmax over the last dim lies below it (what a report then says)."""
        below = probs
        for _ in range(4):  # a few steps down the first operand (the fallback branch of an ``if``)
            if below is None or below.op == Op.SOFTMAX:
                break
            below = below["else"] if below.op == Op.PHI else below.input
        if probs is not None and probs.op != Op.SOFTMAX and below is not None and below.op == Op.SOFTMAX \
                and _softmax_dim_is_last(below) and has_transposed_product(below.input, 16):
            if probs.op == Op.PHI:
                test = label_of(probs["test"]) if probs["test"] is not None else None
                where = f"under `if {test}:`" if test else "in a branch"
                why = f"the probabilities are reassigned {where} between the softmax and the product with V, which " \
                      "the rule does not follow"
            elif probs.op in (Op.RESHAPE, Op.TRANSPOSED, Op.PERMUTE, Op.UNSQUEEZE):
                text = f"`{code(probs.node)}`" if probs.node is not None else "a view"
                why = f"the probabilities are reshaped ({text}) between the softmax and the product with V, which " \
                      "the rule does not follow"
            else:
                text = f"`{code(probs.node)}`" if probs.node is not None else f"a {probs.op.value}"
                why = f"the probabilities go through {text} between the softmax and the product with V, which the " \
                      "kernel does not compute"
            self.why = (below, probs.node or below.node, why)
        return None

    # -- the scores -----------------------------------------------------------------------------
    def scores(self, value: Value):
        found = self.found
        for _ in range(16):
            if value is None:
                return None
            op = value.op
            if op in ("cast", "same"):
                value = value.input
            elif op == "reshape":  # scores of 3-D operands with the heads merged into the batch, reshaped back
                found.merged_heads = True
                value = value.input
            elif op == "phi":
                step = self._optional(value)
                if step is None:
                    test = label_of(value["test"]) if value["test"] is not None else None
                    where = f"under `if {test}:`" if test else "in a branch"
                    return self._unread(f"the scores are computed differently {where}, which the rule does not "
                                        "follow (one form must reach the softmax)")
                if isinstance(step, Refusal):
                    return step
                value = step
            elif op in ("add", "masked_fill", "where"):
                step = self._term(value)
                if step is None or isinstance(step, Refusal):
                    return step
                value = step
            elif op in ("mul", "div"):
                left, right = value.input, value["other"]
                if op == "mul" and is_scores(right) and not is_scores(left):
                    left, right = right, left
                if not is_scores(left) or is_scores(right) or found.scale is not None:
                    return None
                found.scale, found.inverse = right, op == "div"
                value = left
            elif op == "tanh":
                return blocked(value.node, "logit soft-capping (tanh(x / cap) * cap) before the softmax has no "
                                           "fused form", SOFTCAP_PLAN)
            elif op == "cat":
                parts = value["tensors"].items if value["tensors"] is not None else ()
                if len(parts) > 1 and all(has_transposed_product(p) for p in parts):
                    return blocked(value.node, "the scores are concatenated from several q @ kᵀ products, which the "
                                               "kernel computes as one", CONCAT_PLAN)
                return blocked(value.node, "attention sinks (an extra logit column concatenated to the scores)",
                               SINKS_PLAN)
            elif op == "matmul":
                return self._product(value)
            elif op == "baddbmm" and value.node is not None:
                call = value.node
                return baddbmm_scores(call, call, first_operand=1 if len(call.args) >= 3 and call.args[0].keyword is None
                                      and not isinstance(call.func, cst.Attribute) or (code(call.func).startswith("torch.")) else 0)
            elif op == "einsum":
                return blocked(value.node, "attention scores from einsum in a form not proven to be q @ kᵀ "
                                           "(the contraction is not over the last dims of [B, N, S, D] operands)", EINSUM_PLAN)
            else:
                text = f"`{code(value.node)}`" if value.node is not None and len(code(value.node)) <= 80 else \
                    f"a {value.op.value}"
                return self._unread(f"the scores go through {text} before the softmax, which the rule does not read")
        return None

    def _product(self, value: Value):
        found = self.found
        if found.merged_heads or value.name == "bmm":
            return blocked(value.node, "the scores come from 3-D products with the heads merged into the batch, "
                                       "which the rule does not prove to be Q and K^T", MERGED_PLAN)
        q, kt = value.input, value["other"]
        if kt is None or kt.op != Op.TRANSPOSED:
            return None
        if q is not None and q.op == Op.MUL and found.scale is None:  # (q * scale) @ kᵀ
            left, right = q.input, q["other"]
            if right is not None and right.op in (Op.CONST, Op.NAME, Op.FREE, Op.ATTR, Op.PARAM, Op.CALL, Op.POW, Op.DIV):
                found.scale, q = right, left
        found.q, found.k = q, kt.input
        found.terms.reverse()  # read from the softmax back: source order is the reverse
        return found

    def _term(self, value: Value):
        op = value.op
        if op == "add":
            left, right = value.input, value["other"]
            scores, term = (left, right) if is_scores(left) else (right, left)
            if not is_scores(scores) or is_scores(term):
                return None
            label = label_of(term)
            if label is not None and BIAS_NAME.search(label) and not built_as_mask(term):
                return blocked(value.node, f"`{label}` is added to the scores: a position bias by its name (this code "
                                           "does not build it from 0 and -inf)", fallback_pse(f"`{label}`"))
            kind, mask = "additive", term
        elif op == "masked_fill":
            scores, mask, fill = value.input, value["mask"], value["value"]
            kind = "masked"
        else:
            mask, scores, fill = value["condition"], value.input, value["other"]
            kind = "keep"
        if op != "add":
            negative = very_negative(fill)
            if negative is False:
                return blocked(value.node, f"the scores are masked with {code(fill.node) if fill.node else 'a finite value'}, "
                                           "not minus infinity", UNDERFLOW_PLAN)
            if negative is None:
                return None
        if any(t.kind == kind for t in self.found.terms):
            return None
        if mask is not None and mask.op == Op.EXPAND and mask["other"] is not None and is_scores(mask["other"]):
            mask = mask.input  # mask.expand_as(scores): the broadcast the masked op does anyway
        self.found.terms.append(Term(kind, mask))
        return scores

    def _optional(self, value: Value):
        """``if M is not None: S = <S with M applied>``: the term, under that condition; or
        ``if cap is not None: S = tanh(S / cap) * cap``: fused only when there is no soft-cap."""
        test, then, other = value["test"], value["then"], value["else"]
        if is_none_test(test) and then is not None and other is not None and soft_caps(then, other):
            self.found.unless.append(test)
            return other
        for applied, plain in ((then, other), (other, then)):
            if applied is None or plain is None or applied.op not in (Op.ADD, Op.MASKED_FILL, Op.WHERE):
                continue
            before = len(self.found.terms)
            rest = self._term(applied)
            if isinstance(rest, Refusal):
                return rest
            if rest is plain:
                self.found.terms[before].condition = test if applied is then else None
                return plain
            del self.found.terms[before:]
        return None


















def repeated_heads(value: Value) -> Optional[Value]:
    """The tensor with fewer heads that ``value`` repeats for GQA: ``repeat_interleave(x, n, dim=1)``
    or Hugging Face's ``repeat_kv`` (``x[:, :, None, :, :].expand(b, h, n, s, d).reshape(b, h * n, s, d)``,
    inlined by the view)."""
    if value is None:
        return None
    if value.op == Op.REPEAT_INTERLEAVE and number(value["dim"]) == 1:
        return value.input
    if value.op == Op.PHI:  # repeat_kv's `if n_rep == 1: return x`: x either way
        then, other = value["then"], value["else"]
        inner = repeated_heads(other) if then is not None and other is not None else None
        return inner if inner is not None and inner is then else None
    if value.op == Op.RESHAPE and value.input is not None and value.input.op == Op.EXPAND:
        inner = value.input.input
        if inner is not None and inner.op == Op.GETITEM and inner["index2"] is not None \
                and inner["index2"].op == Op.CONST and inner["index2"].name == "None":
            return inner.input
    return None


def _zeroes_dead_rows(found: "Attention") -> bool:
    """``masked_fill(C, 0)`` after ``softmax(S.masked_fill(C, -inf))``, with C the scores' only mask:
    it changes nothing but the rows with every key masked, which it sets to zero."""
    if len(found.terms) != 1 or found.terms[0].kind != "masked" or found.terms[0].condition is not None:
        return False
    a, b = found.terms[0].value, found.zeroed
    if a is not None and b is not None and a.op == b.op == Op.INVERT:
        a, b = a.input, b.input
    return same_value(a, b)




def has_transposed_product(value: Value, depth: int = 12) -> bool:
    return reaches(value, lambda v: v.op in (Op.MATMUL, Op.BADDBMM) and (
        v["other"] is None or v["other"].op == Op.TRANSPOSED or v.op == Op.BADDBMM), depth)


def match(out: Value):
    """(an ``Attention``, a ``Refusal`` or None, the softmax it reached) for the value ``out``: a
    product of probabilities that went through something the kernel does not compute between their
    softmax and V is a ``Refusal`` saying what."""
    if out.op != Op.MATMUL:
        return None, None
    reader = _Reader(out)
    result = reader.read()
    if result is None and reader.why is not None:
        softmax, node, why = reader.why
        return blocked(node, why, MOVED_PROBS_PLAN), softmax
    if isinstance(result, Attention) and (result.q is None or result.k is None or result.v is None):
        return None, reader.found.softmax
    return result, reader.found.softmax
