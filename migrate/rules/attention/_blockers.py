"""Why the fused kernel cannot express an attention site, each with a plan: the reasons NPU303
reports that need more than a sentence (a position bias, probabilities used afterwards, baddbmm
scores, a region that cannot move); the attention matcher (``attention._match``) decides when."""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from ...view.syntax import arg, code, keyword_value, method
from ...refusal import Refusal, blocked
from ....opmap import Fallback

BIAS_NAME = re.compile(r"bias|position|alibi|pse|rel", re.I)


MOVED_PLAN = Fallback("manual", (
    "Keep the original code (it runs on the NPU, unfused). To fuse it, compute everything the kernel reads "
    "(q, k, v, the mask and the scale) before the first statement of the attention, in names the attention "
    "statements do not reassign, keep the output dtype equal to q's, and run migrate again; check with migrate parity."))


def fallback_pse(what: str) -> Fallback:
    return Fallback("custom-kernel", (
        f"{what} is added to the scores inside the softmax. npu_fusion_attention takes such a bias as "
        "`pse` (pse_type=1 computes scale*(QK^T + pse), so pass the bias divided by the scale, or use "
        "npu_fusion_attention_v2 with pse_type=0 for scale*QK^T + pse) after checking its shape is "
        "BNSS, BN1Skv or 1NSS; until then the eager code runs (composite)."))


def probabilities_used(stmt: cst.CSTNode, name: str) -> Refusal:
    return blocked(stmt, f"the attention probabilities `{name}` are used after the product with V "
                   "(returned or consumed); the fused kernel does not form them",
                   Fallback("composite", "keep the eager attention where the probabilities are needed; "
                            "fuse only the path that discards them (e.g. under `if not output_attentions:`)"))


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
                   Fallback("manual", f"this is softmax({scale} * Q @ K^T) @ V{where}: call "
                            f"torch_npu.npu_fusion_attention on the 4-D [B, N, S, D] query, key and value"
                            f"{' cast to float32' if upcast else ''} with input_layout=\"BNSD\", head_num=N and "
                            f"scale={scale}, take [0] and cast it to the value's dtype (or use the matmul path, "
                            "which NPU302 fuses), then check parity; until then the eager code runs"))


def _is_zero(node: Optional[cst.BaseExpression]) -> bool:
    return isinstance(node, (cst.Integer, cst.Float)) and node.evaluated_value == 0
