"""NPU330/NPU331: SwiGLU MLPs → ``torch_npu.npu_swiglu`` (which activates the FIRST half).

Recognised, where ``act`` is SiLU or may be (``F.silu``, ``self.act_fn`` set to ``nn.SiLU()`` or
to something only known at run time such as ``ACT2FN[config.hidden_act]``):

* separate projections of one input, ``act(self.gate(x)) * self.up(x)`` →
  ``npu_glue.swiglu(act, self.gate(x), self.up(x))``;
* the same over three consecutive statements (T5's ``T5DenseGatedActDense``), ``a = act(self.gate(x))``
  and ``b = self.up(x)`` (either order) then ``a * b`` → ``npu_glue.swiglu(act, self.gate(x),
  self.up(x))`` in place of the product, the two assignments removed (their comments kept); when
  ``a`` or ``b`` is read anywhere else it is reported (NPU331) instead;
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

from npu_migrate.migrate.context import HELPER
from npu_migrate.migrate.edits import Replace, Splice, code
from npu_migrate.migrate.rules._dataflow import (
    Expr, assigned_name, bind, last_dim, names_in, number, same, tuple_targets, uses, walk,
)
from npu_migrate.migrate.rules.base import Rule
from npu_migrate.opmap import Fallback

REPORT = "NPU331"
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
REUSE_PLAN = Fallback(
    "manual",
    "Folding the three statements into one npu_glue.swiglu call would change what the other read sees. Keep "
    "the original code (it runs on the NPU, unfused), or keep gate = self.<gate>(x) and up = self.<up>(x) as "
    "plain projections, write the product as npu_glue.swiglu(act, gate, up) (the vendored helper checks SiLU "
    "at run time), and compute act(gate) separately only where it is read.",
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
                self._report_geglu(node)
                return
            act_call = getattr(node, act_side)
            self._rewrite_product(node, act_call.func, kind, "separate gate and up projections", "swiglu",
                                  [_arg(act_call), up])
            return

    def _rewrite_product(self, node, act, kind, form, helper, operands, removed=()) -> None:
        """Replace the product ``node`` by ``npu_glue.<helper>(act, *operands)`` (original nodes, kept
        as migrated); ``removed``: (block, start, end) statement ranges the rewrite makes redundant."""
        act_code = self.ctx.module.code_for_node(act)
        holes = {"act": act, **{f"operand{i}": o for i, o in enumerate(operands)}}
        call = code(f"{HELPER}.{helper}(" + ", ".join(f"{{{name}}}" for name in holes) + ")", **holes)
        edits = [Replace(node, call), *(Splice(block, start, end) for block, start, end in removed)]
        proof = "SiLU proven" if kind == "silu" else f"`{act_code}` checked to be SiLU at run time"
        self.rewrite(node, f"SwiGLU ({form}) → torch_npu.npu_swiglu (guarded: {proof}; original kept)",
                     target="torch_npu.npu_swiglu", edits=edits, helpers=[HELPER])

    # -- a fused projection split in two --------------------------------------------------------
    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        if not self._functions:
            return
        statements = list(node.body)
        for index, (first, second) in enumerate(zip(statements, statements[1:])):
            split = self._split(first)
            if split is not None:
                self._halves((node, index), first, second, *split)
        for index, (first, second, third) in enumerate(zip(statements, statements[1:], statements[2:])):
            self._statements((node, index), first, second, third)

    def _report_geglu(self, node: cst.CSTNode) -> None:
        self.report(node, "GeGLU (GELU-gated MLP) not fused: npu_geglu's activated half and GELU "
                          "approximation must be checked for your CANN version", fallback=GEGLU_PLAN, code=REPORT)

    # -- separate projections over three statements -------------------------------------------
    def _statements(self, at, first: cst.BaseStatement, second: cst.BaseStatement, third: cst.BaseStatement) -> None:
        """``a = act(self.gate(x))`` and ``b = self.up(x)`` (either order), then ``a * b`` in ``third``."""
        bound: Dict[str, cst.BaseExpression] = {}
        for stmt in (first, second):
            small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
            name = assigned_name(small) if small is not None else None
            if name is None:
                return
            bound[name] = small.value
        for node in _products(third):
            for act_side, up_side in (("left", "right"), ("right", "left")):
                act_name, up_name = getattr(node, act_side), getattr(node, up_side)
                if not (isinstance(act_name, cst.Name) and isinstance(up_name, cst.Name)
                        and act_name.value in bound and up_name.value in bound and act_name.value != up_name.value):
                    continue
                found = self._activation(bound[act_name.value])
                # the projections move into the product: they must read there what they read here
                if found is None or not _projections_of_one_input(found[1], bound[up_name.value]) \
                        or set(bound) & set(names_in(found[1])):
                    continue
                self._gated_statements(at, node, found[0], (act_name.value, up_name.value), [first, second])
                return

    def _gated_statements(self, at, node, kind, names, removed) -> None:
        if kind == "gelu":
            self._report_geglu(node)
            return
        reused = [n for n in names if uses(self._functions[-1].body, n) != 2]  # bound once and read once
        if reused:
            self.report(node, "SwiGLU over three statements not fused: " + " and ".join(f"`{n}`" for n in reused)
                        + " is read elsewhere in the function", fallback=REUSE_PLAN, code=REPORT)
            return
        self._handled.add(id(node))
        values = {assigned_name(s.body[0]): s.body[0].value for s in removed}
        act_call, up = values[names[0]], values[names[1]]
        block, index = at
        self._rewrite_product(node, act_call.func, kind, "gate and up projections in separate statements", "swiglu",
                              [_arg(act_call), up], removed=[(block, index, index + 2)])

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

    def _halves(self, at, first: cst.SimpleStatementLine, second: cst.BaseStatement, names, tensor, on_last) -> None:
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
            self._report_geglu(node)
            return
        if activated != gate_name or not on_last:
            why = "the second half is activated" if activated != gate_name else "the split is not along the last dim"
            self.report(node, f"SwiGLU not fused: {why}, but npu_swiglu activates the first half of the last dim",
                        fallback=ORDER_PLAN, code=REPORT)
            return
        self._handled.add(id(node))
        block, index = at
        self._rewrite_product(node, getattr(node, act_side).func, kind, "fused gate_up projection split with chunk(2)",
                              "swiglu_halves", [tensor], removed=[(block, index, index + 1)])


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


