"""NPU340/NPU341: MoE router ``softmax → topk`` → ``torch_npu.npu_moe_gating_top_k_softmax``.

Recognised: two consecutive statements ::

    routing_weights = F.softmax(router_logits, dim=-1 | 1, dtype=torch.float)   # dtype optional
    routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)

become ::

    if npu_glue.moe_gating_fits(router_logits, self.top_k, dim=1):
        routing_weights, selected_experts, _ = torch_npu.npu_moe_gating_top_k_softmax(router_logits.float(), None, k=self.top_k)
        selected_experts = selected_experts.long()
    else:
        <the two original statements>

Any renormalisation that follows (``routing_weights /= routing_weights.sum(-1, keepdim=True)``) is
left in place, so it applies to both branches (the kernel does not renormalise). The kernel returns
int32 indices (``.long()`` restores topk's int64) and weights in its input's dtype (the input is cast
as the original softmax's ``dtype=`` did). It has no backward on a real NPU, so the guard sends
training (grad enabled and logits requiring grad) to the original code. The probabilities must not
be read afterwards (an auxiliary loss over all experts needs them): such code is left alone.

Reported (NPU341): sigmoid routers, softmax or top-k over a dim other than the experts' (expert
choice), and routers whose logits are an expression rather than a name.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from npu_migrate.migrate.context import HELPER
from npu_migrate.migrate.edits import code
from npu_migrate.migrate.guarded import region
from npu_migrate.migrate.rules._dataflow import Expr, assigned_name, call_args, is_true, last_dim, loose_env, number, pure_code, \
    tuple_targets, uses, walk
from npu_migrate.migrate.rules._syntax import is_name
from npu_migrate.migrate.rules._table import TORCH_NPU
from npu_migrate.migrate.rules.base import Rule
from npu_migrate.opmap import Fallback

REPORT = "NPU341"
SOFTMAX = ("torch.nn.functional.softmax", "torch.softmax")
SOFTMAX_PARAMS = ("input", "dim", "_stacklevel", "dtype")
TOPK = ("torch.topk",)
TOPK_PARAMS = ("input", "k", "dim", "largest", "sorted")
SIGMOID = ("torch.sigmoid", "torch.nn.functional.sigmoid")
FLOAT32 = ("torch.float32", "torch.float")
LAST = cst.parse_expression("-1")  # topk's default dim
PLANS = {
    "sigmoid": Fallback("manual", "Sigmoid (DeepSeek-V3-style) routers map to torch_npu.npu_moe_gating_top_k(x, k, "
                                  "bias=..., k_group=..., group_count=..., norm_type=1, renorm=...): rewrite by hand "
                                  "and compare with migrate parity; the original runs on the NPU unfused."),
    "dims": Fallback("manual", "npu_moe_gating_top_k_softmax picks experts per token (softmax and top-k over the "
                               "last, experts' dim); expert-choice routing (top-k over tokens) has no fused kernel: "
                               "keep the original code."),
    "moved": Fallback("manual", "Keep the original code (it runs on the NPU, unfused), or compute the router "
                                "logits and k before the softmax in plain names that the two statements do not "
                                "reassign, then run migrate again."),
    "expr": Fallback("manual", "Assign the router logits to a name first (`router_logits = self.gate(x)`), then "
                               "run migrate again: the guarded rewrite reads them twice."),
}


class MoeGating(Rule):
    code = "NPU340"
    codes = ("NPU340", REPORT)
    name = "moe-gating"
    summary = "MoE router softmax → topk → torch_npu.npu_moe_gating_top_k_softmax (inference; guarded)"
    triggers = (b"topk",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._functions: List[cst.FunctionDef] = []
        self._done: set = set()  # topk calls already rewritten or reported

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(node)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.pop()

    # -- calls --------------------------------------------------------------------------------
    def _call(self, node, functions, method, params) -> Optional[Dict[str, cst.BaseExpression]]:
        """Arguments by name of ``torch.f(x, ...)`` (``functions``) or ``x.method(...)``."""
        if not isinstance(node, cst.Call):
            return None
        return call_args(node, self.qualified_name(node.func), functions, method, params)

    # -- the router -----------------------------------------------------------------------------
    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        if not self._functions or self.ctx.migrated(node):  # a router migrated before is its guard's fallback
            return
        statements = list(node.body)
        for index, (first, second) in enumerate(zip(statements, statements[1:])):
            self._pair(node, index, first, second)

    def _pair(self, block: cst.IndentedBlock, index: int, first: cst.BaseStatement, second: cst.BaseStatement) -> None:
        if not (isinstance(first, cst.SimpleStatementLine) and isinstance(second, cst.SimpleStatementLine)
                and len(first.body) == 1 and len(second.body) == 1):
            return
        probs = assigned_name(first.body[0])
        targets = tuple_targets(second.body[0])
        if probs is None or targets is None or len(targets) != 2:
            return
        softmax = self._call(first.body[0].value, SOFTMAX, "softmax", SOFTMAX_PARAMS)
        topk_call = second.body[0].value
        topk = self._call(topk_call, TOPK, "topk", TOPK_PARAMS)
        if softmax is None or topk is None or not is_name(topk["input"], probs):
            return
        self._done.add(id(topk_call))
        weights, indices = targets
        if weights != probs and uses(self._functions[-1].body, probs) != 2:
            return  # the probabilities are read elsewhere (e.g. an auxiliary loss): not a pure router
        if "largest" in topk and not is_true(topk["largest"]):
            return
        dim = softmax.get("dim")
        if dim is None or not (last_dim(dim) or number(dim) == 1) or not last_dim(topk.get("dim", LAST)):
            self.report(topk_call, "MoE router not fused: softmax/top-k not over the experts' (last) dim",
                        fallback=PLANS["dims"], code=REPORT)
            return
        module = self.ctx.module
        logits_node, upcast = self._upcast(softmax["input"])
        logits, k = pure_code(Expr(logits_node), module), pure_code(Expr(topk["k"]), module) if "k" in topk else None
        if logits is None or k is None:
            self.report(topk_call, "MoE router not fused: the logits or k are expressions, which the guarded "
                                   "rewrite would evaluate twice", fallback=PLANS["expr"], code=REPORT)
            return
        dtype = softmax.get("dtype")
        source = f"{logits}.float()" if upcast else logits
        if dtype is not None and not upcast:
            source = f"{logits}.float()" if self.qualified_name(dtype) in FLOAT32 else f"{logits}.to({module.code_for_node(dtype)})"
        dim_code = module.code_for_node(dim)
        rest = "_" if indices == "_" else f"{indices}"
        fused = [f"{weights}, {rest}, _ = torch_npu.npu_moe_gating_top_k_softmax({source}, None, k={k})\n"]
        fused += [f"{indices} = {indices}.long()\n"] if indices != "_" else []
        guard = f"npu_glue.moe_gating_fits({logits}, {k}, dim={dim_code})"
        # the logits and k are read by the softmax statement, the first of the two
        edit = region(self._functions[-1].body, block, index, index + 2, code(guard), [code(s) for s in fused],
                      at_entry=True)
        if isinstance(edit, str):
            self.report(topk_call, f"MoE router not fused: {edit}", fallback=PLANS["moved"], code=REPORT)
            return
        # one finding for the pair, at the top-k statement; both statements move into the else branch
        self.rewrite(second, f"MoE router softmax → topk (k={k}) → torch_npu.npu_moe_gating_top_k_softmax "
                             "(guarded: inference only; original kept for training)",
                     target="torch_npu.npu_moe_gating_top_k_softmax", edits=[edit], imports=[TORCH_NPU], helpers=[HELPER])

    def _upcast(self, node: cst.BaseExpression) -> Tuple[cst.BaseExpression, bool]:
        """(x, True) for ``x.float()`` / ``x.to(torch.float32)``: softmax of the logits in float32."""
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and len(node.args) <= 1:
            method = node.func.attr.value
            if (method == "float" and not node.args) or (
                    method == "to" and node.args and node.args[0].keyword is None
                    and self.qualified_name(node.args[0].value) in FLOAT32):
                return node.func.value, True
        return node, False

    # -- other routers --------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        if not self._functions or id(node) in self._done:
            return
        topk = self._call(node, TOPK, "topk", TOPK_PARAMS)
        if topk is None:
            return
        env = loose_env(self._functions[-1])
        source = Expr(topk["input"], env).resolve().node
        if self._from_sigmoid(Expr(topk["input"], env)):
            self.report(node, "MoE router not fused: a sigmoid router (npu_moe_gating_top_k_softmax is "
                              "softmax-only)", fallback=PLANS["sigmoid"], code=REPORT)
            return
        softmax = self._call(source, SOFTMAX, "softmax", SOFTMAX_PARAMS)
        if softmax is not None and not (last_dim(softmax.get("dim")) and last_dim(topk.get("dim", LAST))):
            self.report(node, "MoE router not fused: softmax/top-k not over the experts' (last) dim",
                        fallback=PLANS["dims"], code=REPORT)

    def _from_sigmoid(self, expr: Expr, depth: int = 8) -> bool:
        """Whether the value is computed from a sigmoid (locals followed a few levels)."""
        for node in walk(expr.resolve().node):
            if self._is_sigmoid(node):
                return True
            if isinstance(node, cst.Name) and node.value in expr.env and depth > 0:
                if self._from_sigmoid(expr.env[node.value], depth - 1):
                    return True
        return False

    def _is_sigmoid(self, node: cst.CSTNode) -> bool:
        return isinstance(node, cst.Call) and (
            self.qualified_name(node.func) in SIGMOID
            or (isinstance(node.func, cst.Attribute) and node.func.attr.value == "sigmoid"
                and self.qualified_name(node.func) is None))

