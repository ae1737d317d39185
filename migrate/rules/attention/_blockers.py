"""Why the fused kernel cannot express an attention site, each with a plan: the reasons NPU303
reports that need more than a sentence (a position bias, probabilities used afterwards, baddbmm
scores, a region that cannot move); the attention matcher (``attention._match``) decides when."""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from ...view.syntax import arg, code, keyword_value, method
from ...refusal import Refusal, blocked
from ....opmap import Fallback, plan

BIAS_NAME = re.compile(r"bias|position|alibi|pse|rel", re.I)


MOVED_PLAN = plan("attention.moved")
PROBABILITIES_PLAN = plan("attention.probabilities")
POSITION_BIAS_PLAN = plan("attention.position_bias")  # a template: {what}
BADDBMM_PLAN = plan("attention.baddbmm")  # a template: {scale}, {where}, {cast}


def fallback_pse(what: str) -> Fallback:
    return POSITION_BIAS_PLAN.filled(what=what)


def probabilities_used(stmt: cst.CSTNode, name: str) -> Refusal:
    return blocked(stmt, f"the attention probabilities `{name}` are used after the product with V "
                   "(returned or consumed); the fused kernel does not form them",
                   PROBABILITIES_PLAN)


def baddbmm_scores(stmt: cst.CSTNode, call: cst.Call, first_operand: int) -> Refusal:
    """``beta * input + alpha * (batch1 @ batch2)``: ALiBi adds its bias as ``input``; with a literal
    ``beta=0`` the input is ignored and the scores are only the scaled product (GPT-2's
    ``_upcast_and_reordered_attn``), which the kernel expresses once the 3-D operands are proven
    to be Q and K^T with the heads merged into the batch."""
    if not _is_zero(keyword_value(call, "beta")):
        return blocked(stmt, "ALiBi-style scores (baddbmm of a bias with Q and K^T)", fallback_pse("the ALiBi bias"))
    alpha = keyword_value(call, "alpha")
    scale = code(alpha) if alpha is not None else "1.0"
    operands = [arg(call, first_operand, "batch1"), arg(call, first_operand + 1, "batch2")]
    upcast = all(method(o, {"float"}) for o in operands)
    where = " in float32" if upcast else ""
    return blocked(stmt, f"scores from baddbmm with beta=0 (alpha * Q @ K^T{where}, no bias) on 3-D operands "
                         "the rule does not prove to be Q and K^T with the heads merged into the batch",
                   BADDBMM_PLAN.filled(scale=scale, where=where, cast=" cast to float32" if upcast else ""))


def _is_zero(node: Optional[cst.BaseExpression]) -> bool:
    return isinstance(node, (cst.Integer, cst.Float)) and node.evaluated_value == 0
