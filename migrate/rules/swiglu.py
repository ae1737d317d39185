"""NPU330/NPU331: SwiGLU MLPs → ``torch_npu.npu_swiglu`` (which activates the FIRST half).

Recognised, where ``act`` is SiLU or may be (``F.silu``, ``self.act_fn`` set to ``nn.SiLU()`` or
to something only known at run time such as ``ACT2FN[config.hidden_act]``):

* separate projections of one input, ``act(self.gate(x)) * self.up(x)`` →
  ``npu_glue.swiglu(act, self.gate(x), self.up(x))``;
* a fused projection split in two, ``gate, up = self.gate_up(x).chunk(2, dim=-1)`` followed by
  ``act(gate) * up`` → ``npu_glue.swiglu_halves(act, self.gate_up(x))`` (the split is removed).

The helpers (vendored ``npu_glue.py``) call ``torch_npu.npu_swiglu`` when ``act`` is SiLU at run
time and the halves fit, and compute the original ``act(gate) * up`` otherwise, so a model built
with another activation (a GELU config) keeps its exact behaviour. Reported (NPU331): GeGLU
(``gelu`` gate: ``npu_geglu``'s half order and GELU approximation differ between CANN versions) and
a fused split whose SECOND half is activated.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from migrate.rules._dataflow import Expr, bind, last_dim, number, same, tuple_targets, uses, walk
from migrate.rules.base import Rule
from opmap import Fallback

REPORT = "NPU331"
HELPER = "npu_glue"
SILU = ("torch.nn.functional.silu", "torch.nn.SiLU")
GELU = ("torch.nn.functional.gelu", "torch.nn.GELU")
GEGLU_PLAN = Fallback(
    "manual",
    "Keep the original code (it runs on the NPU, unfused). To fuse, use torch_npu.npu_geglu on "
    "torch.cat of the two halves, with approximate=0 for erf GELU or 1 for tanh, and check on your "
    "CANN version which half it activates (activate_left) before trusting it; compare with migrate parity.",
)
ORDER_PLAN = Fallback(
    "manual",
    "npu_swiglu activates the first half. Reorder the fused projection's output rows so the gate comes "
    "first (swap the two halves of the weight, and of the bias, when loading the checkpoint), then use "
    "torch_npu.npu_swiglu(gate_up, dim=-1).",
)


class SwiGlu(Rule):
    code = "NPU330"
    codes = ("NPU330", REPORT)
    name = "swiglu"
    summary = "act(gate(x)) * up(x) with a SiLU gate → torch_npu.npu_swiglu (SiLU checked at run time)"
    triggers = (b"silu", b"SiLU", b"act", b"gelu", b"GELU")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._attributes: List[Dict[str, cst.BaseExpression]] = []  # per enclosing class: self.X = value in __init__
        self._functions: List[cst.FunctionDef] = []
        self._handled: set = set()

    # -- context -------------------------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        found: Dict[str, cst.BaseExpression] = {}
        body = node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
        for init in (s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"):
            for stmt in init.body.body if isinstance(init.body, cst.IndentedBlock) else ():
                for small in getattr(stmt, "body", ()) if isinstance(stmt, cst.SimpleStatementLine) else ():
                    if isinstance(small, cst.Assign) and len(small.targets) == 1:
                        target = small.targets[0].target
                        if isinstance(target, cst.Attribute) and _is_self(target.value):
                            found[target.attr.value] = small.value
        self._attributes.append(found)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self._attributes.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(node)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.pop()

    # -- the activation ---------------------------------------------------------------------------
    def _activation(self, call: cst.BaseExpression) -> Optional[Tuple[str, cst.BaseExpression]]:
        """("silu" | "gelu" | "unknown", argument) for a one-argument call of an activation."""
        if not (isinstance(call, cst.Call) and len(call.args) == 1 and call.args[0].keyword is None
                and not call.args[0].star):
            return None
        func, argument = call.func, call.args[0].value
        qualified = self.qualified_name(func)
        if qualified is not None:
            kind = "silu" if qualified in SILU[:1] else "gelu" if qualified in GELU[:1] else None
            return (kind, argument) if kind else None
        if isinstance(func, cst.Attribute) and _is_self(func.value) and self._attributes:
            value = self._attributes[-1].get(func.attr.value)
            if value is None:
                return None  # not set in __init__: not an activation we can reason about
            made = self.qualified_name(value.func) if isinstance(value, cst.Call) else self.qualified_name(value)
            if made in SILU:
                return "silu", argument
            if made in GELU:
                return "gelu", argument
            if isinstance(value, (cst.Subscript, cst.Call)) and not (made or "").startswith("torch."):
                return "unknown", argument  # ACT2FN[...], get_activation(...): known only at run time
        return None

    # -- separate projections -------------------------------------------------------------------
    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if id(node) in self._handled or not isinstance(node.operator, cst.Multiply):
            return
        for act_side, up_side in (("left", "right"), ("right", "left")):
            found = self._activation(getattr(node, act_side))
            if found is None:
                continue
            kind, gate = found
            up = getattr(node, up_side)
            if not _projections_of_one_input(gate, up):
                continue
            if kind == "gelu":
                self.report(node, "GeGLU (GELU-gated MLP) not fused: npu_geglu's activated half and GELU "
                                  "approximation must be checked for your CANN version", fallback=GEGLU_PLAN, code=REPORT)
                return
            self._rewrite_product(node, act_side, kind, "separate gate and up projections",
                                  lambda updated: (getattr(updated, up_side), _arg(getattr(updated, act_side))),
                                  "swiglu")
            return

    def _rewrite_product(self, node, act_side, kind, form, parts, helper, split=None) -> None:
        act_code = self.ctx.module.code_for_node(getattr(node, act_side).func)

        def fix(updated: cst.BinaryOperation) -> cst.BaseExpression:
            up, gate = parts(updated)
            args = [cst.Arg(cst.parse_expression(act_code))]
            args += [cst.Arg(split())] if split is not None else [cst.Arg(gate), cst.Arg(up)]
            call = cst.Call(cst.parse_expression(f"npu_glue.{helper}"), _commas(args))
            return call.with_changes(lpar=updated.lpar, rpar=updated.rpar)

        proof = "SiLU proven" if kind == "silu" else f"`{act_code}` checked to be SiLU at run time"
        self.rewrite(node, fix, f"SwiGLU ({form}) → torch_npu.npu_swiglu (guarded: {proof}; original kept)",
                     target="torch_npu.npu_swiglu", helpers=[HELPER])

    # -- a fused projection split in two --------------------------------------------------------
    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        if not self._functions:
            return
        statements = list(node.body)
        for first, second in zip(statements, statements[1:]):
            split = self._split(first)
            if split is not None:
                self._halves(first, second, *split)

    def _split(self, stmt: cst.BaseStatement) -> Optional[Tuple[Tuple[str, str], cst.BaseExpression, bool]]:
        """((first, second), the split tensor, along the last dim) for ``a, b = t.chunk(2, dim)``."""
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
            return None
        names = tuple_targets(stmt.body[0])
        if names is None or len(names) != 2:
            return None
        call = stmt.body[0].value
        if not isinstance(call, cst.Call):
            return None
        if self.qualified_name(call.func) == "torch.chunk":
            args = bind(call, ("input", "chunks", "dim"))
        elif isinstance(call.func, cst.Attribute) and call.func.attr.value == "chunk":
            args = bind(call, ("input", "chunks", "dim"), offset=1)
            if args is not None:
                args["input"] = call.func.value
        else:
            return None
        if args is None or number(args.get("chunks")) != 2:
            return None
        return names, args["input"], last_dim(args.get("dim"))

    def _halves(self, first: cst.SimpleStatementLine, second: cst.BaseStatement, names, tensor, on_last) -> None:
        gate_name, up_name = names
        function = self._functions[-1]
        product = None
        for candidate in _products(second):
            for act_side, other_side in (("left", "right"), ("right", "left")):
                found = self._activation(getattr(candidate, act_side))
                other = getattr(candidate, other_side)
                if found is not None and isinstance(found[1], cst.Name) and isinstance(other, cst.Name):
                    product = (candidate, act_side, found, found[1].value, other.value)
        if product is None:
            return
        node, act_side, (kind, _), activated, multiplied = product
        if {activated, multiplied} != {gate_name, up_name}:
            return
        if any(uses(function.body, n) != 2 for n in names):  # bound once (the split) and read once
            return
        if kind == "gelu":
            self.report(node, "GeGLU (GELU-gated MLP) not fused: npu_geglu's activated half and GELU "
                              "approximation must be checked for your CANN version", fallback=GEGLU_PLAN, code=REPORT)
            return
        if activated != gate_name or not on_last:
            why = "the second half is activated" if activated != gate_name else "the split is not along the last dim"
            self.report(node, f"SwiGLU not fused: {why}, but npu_swiglu activates the first half of the last dim",
                        fallback=ORDER_PLAN, code=REPORT)
            return
        self._handled.add(id(node))
        function_form = self.qualified_name(first.body[0].value.func) == "torch.chunk"
        stash: List[cst.SimpleStatementLine] = []

        def remove_split(updated: cst.SimpleStatementLine):
            stash.append(updated)
            return cst.RemovalSentinel.REMOVE

        def keep_comments(updated: cst.SimpleStatementLine):
            return updated.with_changes(leading_lines=[*stash[0].leading_lines, *updated.leading_lines])

        if self.ctx.enabled(self.code):  # part of the product's rewrite (one finding for the three fixes)
            self.also_fix(first, remove_split)
            self.also_fix(second, keep_comments)
        self._rewrite_product(node, act_side, kind, "fused gate_up projection split with chunk(2)",
                              lambda updated: (None, None), "swiglu_halves",
                              split=lambda: _split_input(stash[0].body[0].value, function_form))


def _split_input(call: cst.Call, function_form: bool) -> cst.BaseExpression:
    """The tensor split by ``torch.chunk(t, 2, ...)`` or ``t.chunk(2, ...)``."""
    return call.args[0].value if function_form else call.func.value


def _is_self(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Name) and node.value == "self"


def _arg(call: cst.Call) -> cst.BaseExpression:
    return call.args[0].value


def _projections_of_one_input(gate: cst.BaseExpression, up: cst.BaseExpression) -> bool:
    """``self.a(x) , self.b(x)``: two different module attributes called on the same arguments."""
    if not (isinstance(gate, cst.Call) and isinstance(up, cst.Call)):
        return False
    if not all(isinstance(c.func, cst.Attribute) and _is_self(c.func.value) for c in (gate, up)):
        return False
    if gate.func.attr.value == up.func.attr.value or len(gate.args) != len(up.args) or not gate.args:
        return False
    keyword = lambda arg: arg.keyword.value if arg.keyword is not None else None  # noqa: E731
    return all(keyword(a) == keyword(b) and not a.star and not b.star and same(Expr(a.value), Expr(b.value))
               for a, b in zip(gate.args, up.args))


def _products(stmt: cst.CSTNode) -> List[cst.BinaryOperation]:
    return [n for n in walk(stmt) if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Multiply)]


def _commas(args: List[cst.Arg]) -> List[cst.Arg]:
    return [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) if i < len(args) - 1 else a
            for i, a in enumerate(args)]
