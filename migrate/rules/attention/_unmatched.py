"""Why a softmax over q·kᵀ scores was not fused when no product with V read back to it: the
reports of NPU303 that name the scores' form (einsum scores, the sum of two products as in latent
attention), and which softmaxes feed a product at all (``feeding_products``: what attention does
with its probabilities; the residual detector asks the same)."""

from __future__ import annotations

from typing import List, Optional

from ._match import EINSUM_PLAN, has_transposed_product, is_scores
from ._pieces import label_of
from ...refusal import Refusal, blocked
from ...view import Value
from ...view.ops import Op
from ...view.values import reaches
from ....opmap import plan

MLA_PLAN = plan("attention.latent")


def unmatched_scores(softmax: Value) -> Optional[Refusal]:
    """Why a softmax over attention scores was not fused when no product with V consumed it (the
    form is reported, never left silent), or None when its input is not q·kᵀ scores."""
    scores = softmax.input
    while scores is not None and scores.op in (Op.CAST, Op.SAME, Op.RESHAPE):
        scores = scores.input
    if scores is None:
        return None
    cores = _cores(scores)
    latent = next((c for c in cores if c.op == Op.ADD and _is_product(c.input) and _is_product(c["other"])), None)
    if latent is not None:
        parts = " and ".join(_product_text(p) for p in (latent.input, latent["other"]))
        return blocked(latent.node, f"the scores are the sum of two products, {parts} (two query-key pairs: latent "
                                    "attention's parts without and with rotary, or two streams such as text and "
                                    "layout), which the kernel does not compute as one q @ kᵀ", MLA_PLAN)
    if scores.op == Op.EINSUM or any(c.op == Op.EINSUM for c in cores):
        return blocked(scores.node, "attention scores from einsum in a form not proven to be q @ kᵀ "
                                     "(the contraction is not over the last dims of [B, N, S, D] operands)", EINSUM_PLAN)
    if not is_scores(scores) or not has_transposed_product(scores):
        return None
    return blocked(softmax.node, "attention whose probabilities are not multiplied by V in a form the rule "
                                 "reads (P @ V, matmul, bmm or einsum over the last dims)", EINSUM_PLAN)




def _is_product(value: Optional[Value]) -> bool:
    """A product of two tensors, possibly cast or scaled (``q @ kᵀ / sqrt(d)``)."""
    return _product_below(value) is not None


def _product_below(value: Optional[Value]) -> Optional[Value]:
    for _ in range(4):
        if value is None:
            return None
        if value.op in (Op.EINSUM, Op.MATMUL):
            return value
        if value.op in (Op.MUL, Op.DIV):
            sides = [s for s in (value.input, value["other"]) if s is not None and reaches(s, _is_einsum_or_matmul, 4)]
            value = sides[0] if len(sides) == 1 else None
        else:
            value = value.input if value.op in (Op.CAST, Op.SAME) else None
    return None


def _is_einsum_or_matmul(value: Value) -> bool:
    return value.op in (Op.EINSUM, Op.MATMUL)


def _product_text(value: Value) -> str:
    """``einsum("bshc,btc->bsht")`` for an einsum, ``a @ b`` source for a short product, else "a product"."""
    value = _product_below(value) or value
    if value.op == Op.EINSUM and value["equation"] is not None and value["equation"].name:
        return f'the einsum `"{value["equation"].name}"`'
    label = label_of(value)
    return f"`{label}`" if label and len(label) <= 80 else "a product"


def _cores(scores: Value, depth: int = 8) -> List[Value]:
    """What the scores are computed from under their masks, scales, casts and branches: the values a
    walk stops at (every branch of an ``if``; the side of a sum or product that holds a product)."""
    found, stack = [], [(scores, 0)]
    while stack:
        value, level = stack.pop()
        if value is None or level > depth:
            continue
        if value.op in (Op.CAST, Op.SAME, Op.RESHAPE, Op.MASKED_FILL):
            stack.append((value.input, level + 1))
        elif value.op == Op.PHI:
            stack += [(value["then"], level + 1), (value["else"], level + 1)]
        elif value.op in (Op.ADD, Op.MUL, Op.DIV) and not (value.op == Op.ADD and _is_product(value.input)
                                                            and _is_product(value["other"])):
            sides = [s for s in (value.input, value["other"]) if s is not None and reaches(s, _is_product, 8)]
            stack += [(s, level + 1) for s in sides[:1]] if len(sides) == 1 else []
            found += [value] if len(sides) != 1 else []
        else:
            found.append(value)
    return found


def feeding_products(view) -> set:
    """Ids of the values whose output (cast, dropped out, sliced, chosen in a branch, or times another
    tensor such as a head mask) feeds a product or a call: what attention does with its
    probabilities. Two softmaxes multiplied elementwise (dual-softmax matching) feed no product.
    Memoised on the view."""
    found = getattr(view, "_feeding", None)
    if found is not None:
        return found

    def base(operand):
        while operand is not None and operand.op in (Op.CAST, Op.SAME, Op.DROPOUT, Op.GETITEM, Op.PHI):
            operand = operand.input if operand.op != Op.PHI else operand["else"]
        return operand

    found = set()
    for value in view.values.values():
        if value.op in (Op.MATMUL, Op.EINSUM, Op.CALL):
            for operand in [*value.kw.values(), *(i for v in value.kw.values() for i in v.items)]:
                below = base(operand)
                found |= {id(below)} if below is not None else set()
                if below is not None and below.op == Op.MUL:
                    found |= {id(base(side)) for side in (below.input, below["other"]) if base(side) is not None}
    view._feeding = found
    return found
