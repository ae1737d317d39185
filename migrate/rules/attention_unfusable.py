"""NPU303: attention the fused kernel cannot express exactly is reported, with a plan, not rewritten.

Soft-capped logits (``tanh(x / cap) * cap``), attention sinks, a position bias (T5's
``position_bias``, ALiBi) added inside the softmax, a head mask multiplying the probabilities,
probabilities used after the product with V, and einsum forms the rules do not prove.
"""

from __future__ import annotations

from npu_migrate.migrate.rules._attention_blockers import Blocked
from npu_migrate.migrate.rules._attention_rule import FunctionRule
from npu_migrate.migrate.rules.base import Rule


class AttentionUnfusable(FunctionRule, Rule):
    code = "NPU303"
    name = "attention-unfusable"
    summary = "attention the fused kernel cannot express exactly (soft-cap, sinks, bias, used probabilities): reported"
    triggers = (b"softmax",)

    def found(self, result, func) -> None:
        if isinstance(result, Blocked):
            self.report(result.node, f"attention not fused: {result.reason}", fallback=result.fallback, api="attention")
