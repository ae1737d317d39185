"""Why the fused kernel cannot express an attention site, each with a plan: the reasons NPU303
reports (soft-capping, sinks, a position bias, a head mask, probabilities used afterwards, and
score forms the rules do not prove: einsum and baddbmm)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import libcst as cst
import libcst.matchers as m

from npu_migrate.migrate.rules._attention_exprs import softmax_in
from npu_migrate.migrate.rules._later_uses import statements_after
from npu_migrate.migrate.rules._syntax import Qualify, arg, assign, code, keyword_value, method, names_in
from npu_migrate.opmap import Fallback

BIAS_NAME = re.compile(r"bias|position|alibi|pse|rel", re.I)
SOFTMAX_WITHIN = 5  # statements after other score forms in which their softmax must follow


@dataclass
class Blocked:
    node: cst.CSTNode
    reason: str
    fallback: Fallback


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


def blocker_in_scores(stmt: cst.CSTNode, cur: str, qualify: Qualify) -> Optional[Blocked]:
    for call in m.findall(stmt, m.Call()):
        if qualify(call.func) == "torch.tanh" or method(call, {"tanh"}):
            return Blocked(stmt, "logit soft-capping (tanh(x / cap) * cap) before the softmax has no fused form",
                           Fallback("composite", "keep the eager attention (the fused kernel has no soft-cap); "
                                    "a custom kernel (TileLang-Ascend / Ascend C) could fuse it"))
        if qualify(call.func) == "torch.cat" and cur in names_in(call):
            return Blocked(stmt, "attention sinks (an extra logit column concatenated to the scores)",
                           Fallback("manual", "npu_fusion_attention's `sink` argument (float32 [head_num], needs a "
                                    "recent CANN) computes per-head sinks: pass the sink logits there and drop "
                                    "the concatenation, then check parity; until then the eager code runs"))
    return None


def position_bias(expr: cst.BaseExpression, stmt: cst.CSTNode) -> Optional[Blocked]:
    """A term added to the scores is a position bias, not a mask, when its name says so."""
    if not BIAS_NAME.search(code(expr)):
        return None
    return Blocked(stmt, f"a position bias ({code(expr)}) is added to the scores", fallback_pse(f"`{code(expr)}`"))


def head_mask(stmt: cst.CSTNode) -> Blocked:
    return Blocked(stmt, "the attention probabilities are multiplied by a head mask",
                   Fallback("composite", "keep the eager attention, or apply the head mask to the output "
                            "per head when it is a per-head scalar (it then commutes with P @ V)"))


def probabilities_used(stmt: cst.CSTNode, name: str) -> Blocked:
    return Blocked(stmt, f"the attention probabilities `{name}` are used after the product with V "
                   "(returned or consumed); the fused kernel does not form them",
                   Fallback("composite", "keep the eager attention where the probabilities are needed; "
                            "fuse only the path that discards them (e.g. under `if not output_attentions:`)"))


def other_score_forms(stmt: cst.CSTNode, body: cst.BaseSuite, qualify: Qualify) -> Optional[Blocked]:
    """Scores from einsum or baddbmm, when their softmax follows within a few statements of the
    function (also outside the block, as after GPT-2's ``with torch.autocast(...):``)."""
    got = assign(stmt)
    if got is None or not isinstance(got[1], cst.Call):
        return None
    name, call = got[0], got[1]
    func = qualify(call.func) or ""
    baddbmm = func == "torch.baddbmm" or method(call, {"baddbmm"}) is not None
    if not (baddbmm or func == "torch.einsum"):
        return None
    if not any(softmax_in(s, name, qualify) for s in statements_after(body, stmt)[:SOFTMAX_WITHIN]):
        return None
    if baddbmm:
        return _baddbmm_scores(stmt, call, first_operand=0 if func != "torch.baddbmm" else 1)
    return Blocked(stmt, "attention scores from einsum (this form is not proven equal to the fused kernel)",
                   Fallback("manual", "rewrite the scores as torch.matmul(q, k.transpose(-2, -1)) on [B, N, S, D] "
                            "tensors (or call F.scaled_dot_product_attention) so NPU302/NPU301 can fuse them"))


def _baddbmm_scores(stmt: cst.CSTNode, call: cst.Call, first_operand: int) -> Blocked:
    """``beta * input + alpha * (batch1 @ batch2)``: ALiBi adds its bias as ``input``; with a literal
    ``beta=0`` the input is ignored and the scores are only the scaled product (GPT-2's
    ``_upcast_and_reordered_attn``), which the kernel expresses once the 3-D operands are proven
    to be Q and K^T with the heads merged into the batch."""
    if not _is_zero(keyword_value(call, "beta")):
        return Blocked(stmt, "ALiBi-style scores (baddbmm of a bias with Q and K^T)", fallback_pse("the ALiBi bias"))
    alpha = keyword_value(call, "alpha")
    scale = code(alpha) if alpha is not None else "1.0"
    operands = [arg(call, first_operand, "batch1"), arg(call, first_operand + 1, "batch2")]
    upcast = all(method(o, {"float"}) for o in operands)
    where = " in float32" if upcast else ""
    return Blocked(stmt, f"scores from baddbmm with beta=0 (alpha * Q @ K^T{where}, no bias) on 3-D operands "
                         "the rule does not prove to be Q and K^T with the heads merged into the batch",
                   Fallback("manual", f"this is softmax({scale} * Q @ K^T) @ V{where}: call "
                            f"torch_npu.npu_fusion_attention on the 4-D [B, N, S, D] query, key and value"
                            f"{' cast to float32' if upcast else ''} with input_layout=\"BNSD\", head_num=N and "
                            f"scale={scale}, take [0] and cast it to the value's dtype (or use the matmul path, "
                            "which NPU302 fuses), then check parity; until then the eager code runs"))


def _is_zero(node: Optional[cst.BaseExpression]) -> bool:
    return isinstance(node, (cst.Integer, cst.Float)) and node.evaluated_value == 0
