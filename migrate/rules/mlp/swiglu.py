"""NPU330/NPU331: gated MLPs → ``torch_npu.npu_swiglu`` (activates the FIRST half) / ``npu_geglu``
(either half: ``activate_left``).

Matched on the dataflow view (``mlp._match``), so a gated MLP is found however it is spelled:
``act(gate) * up`` or ``up * act(gate)``, in one expression or over several statements (litgpt's
``x_fc_1 = self.fc_1(x)``, ``x_fc_2 = self.fc_2(x)``, ``silu(x_fc_1) * x_fc_2``), in a function defined
inside ``forward`` or a method it calls, with ``act`` being ``F.silu``, ``nn.SiLU``, ``x * sigmoid(x)``,
an attribute set to ``F.silu`` in ``__init__``, an ``ACT2FN[...]`` attribute, any other attribute
(``self.config.activation_func``) or a module passed to the constructor (torchtune's ``FeedForward``):
resolved at run time by the vendored helper. No name decides: the same code under any class, function
or attribute name gives the same finding.

* two projections of one input → ``npu_glue.swiglu_linear(act, gate, up, x)``;
* a fused projection split in two, ``gate, up = self.gate_up(x).chunk(2, dim=-1)`` →
  ``npu_glue.swiglu_halves(act, self.gate_up(x))``; with a GELU gate (``F.gelu``/``nn.GELU`` of
  either approximation) → ``npu_glue.geglu_halves(act, self.gate_up(x), approximate)``; the second half
  activated (``up, gate = ...``) → the same with ``second=True``: npu_geglu's ``activate_left`` picks
  the half, npu_swiglu gets the halves swapped into [gate | up] (a copy, as for two projections);
* gate and up scaled before the product (``act(self.w1(x) * scale) * self.w3(x)``, halves scaled by
  learned vectors) → ``npu_glue.swiglu(act, gate=..., up=...)`` / ``geglu`` / ``glu`` on the values the
  code computes, in the order it computes them;
* an up projection applied under a flag (torchtune's ``h = act(w1(x)); if self.w3 is not None:
  h = h * self.w3(x)``) → a guarded region whose fused branch runs when the flag holds.

Statements that only compute the operands are folded into the call (their comments kept); names they
bind must be read nowhere else. The helpers check at run time what cannot be proven (the activation
is SiLU or GELU, shapes and dtypes fit) and compute the original ``act(gate) * up`` otherwise, so a
model configured with another activation keeps its exact behaviour. Reported (NPU331): GeGLU over
einsum/matmul weights, splits along another dim than the last, other activations (ReLU, clamped
SwiGLU), and sites whose intermediate values are read elsewhere.
"""

from __future__ import annotations

from typing import Dict, Optional, Set, Tuple, Union

import libcst as cst

from ...context import HELPER
from ...diagnostics import DiagnosticCode
from ...parens import atom
from ...refusal import Refusal, unavailable, unplaced
from ...view.emit import Written, in_place, place, sited
from ...view.regions import Slice, _statement_index, enclosing_block, interior
from ._experts import DECORATOR, experts_gate, last_statement
from ._feeders import Node, assigned, inside, operand, removable
from ._match import Gated, gated_in
from ...view.syntax import code, walk_names
from ..base import Rule
from ....opmap import Fallback
from ...view.ops import Op

REPORT = "NPU331"
REUSE_PLAN = Fallback("manual", (
    "Folding the statements into one npu_glue call would change what the other read sees. Keep the original "
    "code (it runs on the NPU, unfused), or compute the gate and up projections in names read only by the "
    "product, write the product as npu_glue.swiglu(act, gate, up) (the vendored helper checks SiLU at run "
    "time), and compute act(gate) separately only where it is read."))
SILU = "torch.nn.functional.silu"
EXPERTS_DECORATOR = DECORATOR.rsplit(".", 1)[-1]  # what names the decorator, whatever imports it


#: the nodes that bind names (``_rebound``)
_BINDERS = (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.AsName, cst.NamedExpr, cst.Del,
            cst.ImportAlias, cst.FunctionDef, cst.ClassDef)
#: Python's builtins of size arithmetic, never an activation or a projection
ARITHMETIC = frozenset({"int", "float", "round", "len", "range", "min", "max", "abs", "sum", "divmod"})


def _literal(node: cst.CSTNode) -> bool:
    """A number literal (``2``, ``-0.5``): a product with it scales, it gates nothing."""
    while isinstance(node, cst.UnaryOperation):
        node = node.expression
    return isinstance(node, (cst.Integer, cst.Float))


class SwiGlu(Rule):
    declarations = (
        DiagnosticCode("NPU330", "swiglu",
                       "act(gate(x)) * up(x) with a SiLU or GELU gate → torch_npu.npu_swiglu / npu_geglu (checked "
                       "at run time)", rewrites=True, example="swiglu_fused"),
        DiagnosticCode(REPORT, "swiglu-unfused",
                       "gated MLPs the fused kernels cannot express exactly (reported, not rewritten)",
                       example="swiglu_reported"),
    )
    # a product (what decides is the dataflow, never a name: ``self.nonlin`` is an activation too), or an
    # experts class the library gates
    triggers = (b"*", b"mul", EXPERTS_DECORATOR.encode())

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self.ctx.is_helper:
            return
        if not self._may_gate(node):
            return
        view = self.ctx.view(node)
        for match in gated_in(view):
            where = match.product.node if isinstance(match, Gated) else match.node
            if self.ctx.migrated(where):
                continue  # a fused call or the fallback of a guard emitted before
            if isinstance(match, Refusal):
                self.report(match.node, match.reason, fallback=match.fallback, code=REPORT)
                continue
            problem = self._rewrite(match, view)
            if problem is not None:
                self.report(match.product.node, f"gated MLP not fused: {problem}", fallback=REUSE_PLAN, code=REPORT)

    @classmethod
    def may_find(cls, words) -> bool:
        """``_may_gate`` for some function, or an experts class's decorator (``_swiglu_experts``: named,
        as a name or an attribute, however it is imported)."""
        return EXPERTS_DECORATOR in words.names or any("mul" in f.names or f.products for f in words.functions)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        """An MoE experts class that transformers gates with its library default (``mlp._experts``)."""
        if self.ctx.is_helper or self.ctx.migrated(node):
            return
        edit = experts_gate(node, self.qualified_name, self.ctx.module)
        if edit is not None:
            self.rewrite(last_statement(node), f"MoE experts {node.name.value}: transformers' grouped_mm/batched_mm gate "
                                    "(act_fn(gate) * up) → npu_glue.glu_halves (torch_npu.npu_swiglu / npu_geglu, "
                                    "checked at run time) as its own _apply_gate",
                         target="torch_npu.npu_swiglu", edits=[edit], helpers=[HELPER])

    def _may_gate(self, func: cst.FunctionDef) -> bool:
        """The cheap filter before the view is built: the function calls ``mul`` or multiplies two values
        computed in it (not a number literal, not a parameter it keeps, not an attribute: ``2 *
        config.intermediate_size``, ``num_heads * head_dim`` gate nothing; a gated MLP multiplies an
        activation's result), and calls something that may be an activation (not only ``math`` and
        Python's number builtins). No name of the code decides: an activation may be any attribute
        (``self.nonlin`` set from a config), and the same code under other names gives the same finding."""
        tree = self.ctx.tree
        if "mul" not in tree.names(func.body) and not self._multiplies_computed(func):
            return False
        return any(not self._arithmetic(call) for call in tree.of_type(func.body, cst.Call))

    def _multiplies_computed(self, func: cst.FunctionDef) -> bool:
        pairs = [(n.left, n.right) if n.__class__ is cst.BinaryOperation else (n.target, n.value)
                 for n in self.ctx.tree.of_type(func.body, cst.BinaryOperation, cst.AugAssign)
                 if n.operator.__class__ in (cst.Multiply, cst.MultiplyAssign)]
        pairs = [pair for pair in pairs if not any(_literal(n) or isinstance(n, cst.Attribute) for n in pair)]
        if any(not isinstance(a, cst.Name) and not isinstance(b, cst.Name) for a, b in pairs):
            return True
        if not pairs:
            return False
        params = func.params
        kept = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
        kept -= self._rebound(func)
        return any(all(not (isinstance(n, cst.Name) and n.value in kept) for n in pair) for pair in pairs)

    def _rebound(self, func: cst.FunctionDef) -> Set[str]:
        """Names bound anywhere in ``func``'s body (nested functions' too: more than ``defuse.defined``,
        from the tree's index of node classes, which is cheap)."""
        found: Set[str] = set()
        for node in self.ctx.tree.of_type(func.body, *_BINDERS):
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                found.add(node.name.value)
            elif isinstance(node, cst.ImportAlias):
                found.update(walk_names(node.asname.name if node.asname else node.name)[-1:])
            else:
                found.update(walk_names(node.name if isinstance(node, cst.AsName) else node.target))
        return found

    def _arithmetic(self, call: cst.Call) -> bool:
        """A call of ``math`` or of a number builtin the module does not rebind."""
        func, names = call.func, self.ctx.names
        if isinstance(func, cst.Name) and func.value in ARITHMETIC:
            return func.value not in names.imports and func.value not in names.other_bindings
        return (self.qualified_name(func) or "").startswith("math.")

    # -- the fused call ---------------------------------------------------------------------------
    def _call(self, m: Gated, operand) -> Union[Tuple[str, Dict[str, cst.CSTNode], str], Refusal]:
        """(call text with holes, holes, what it is) for the match, or why it cannot be written;
        ``operand(value)`` gives the text or the hole of an operand where the call runs."""
        holes: Dict[str, cst.CSTNode] = {}
        missing = []

        def put(name, value):
            found = operand(value) if value is not None else None
            if found is None:
                missing.append(name)
                return name
            text, node = found
            if node is None:
                return text
            holes[name] = node
            return "{" + name + "}"

        act = self._act(m)
        if act is None:
            return unavailable("the activation is not available as a function where the product is")
        act_text = put("act", act) if not isinstance(act, str) else act
        glu = {"silu": "swiglu", "gelu": "geglu", "runtime": "glu"}[m.kind]
        approximate = [f"approximate={self._approximate(m)}"] if m.kind == "gelu" and act == "None" else []
        order = ["up_first=True"] if m.form not in ("halves", "operands") and self._up_first(m) else []
        if m.form == "halves":
            tensor = put("tensor", m.source)
            if m.cast is not None:
                cast = self._cast(m.cast)
                if cast is None:
                    return unavailable("the halves are cast to a dtype that is not a plain name")
                tensor = f"{tensor}.{cast}"
            args, what = [act_text, tensor], "fused gate_up projection split with chunk(2)"
            if m.second:
                args, what = args + ["second=True"], "fused up_gate projection split with chunk(2), the second half " \
                                                     "activated"
        elif m.form == "operands":  # keywords in the original's order: the operands are evaluated as there
            pair = [("gate", m.gate), ("up", m.up)]
            args = [act_text, *(f"{role}={put(role, value)}" for role, value in
                                (reversed(pair) if self._up_first(m) else pair))]
            what = {"halves": "halves of a projection split with chunk(2), scaled before the product",
                    "projections": "gate and up projections, scaled before the product"}[m.scales]
        elif m.form == "projections":
            args = [act_text, put("gate", m.modules[0]), put("up", m.modules[1]), put("x", m.source)]
            glu, what = f"{glu}_linear", "gate and up projections"
        else:
            args = [act_text, put("x", m.source), put("gate", m.weights[0]), put("up", m.weights[1])]
            args += [f"equation={m.equation!r}"] if m.equation else []
            glu, what = "swiglu_stacked", "gate and up products with two weights"
        if m.form == "halves":
            glu = f"{glu}_halves"
        if missing:
            return unavailable(f"the {missing[0]} operand is not available where the product is")
        name = {"silu": "SwiGLU", "gelu": "GeGLU", "runtime": "SwiGLU/GeGLU"}[m.kind]
        return sited(f"{HELPER}.{glu}({', '.join(args + approximate + order)})"), holes, f"{name} ({what})"

    def _act(self, m: Gated):
        """The activation: a value whose code is the callable, "None" for ``F.gelu`` (the helper takes
        its approximation instead), or None when it has no source."""
        act = m.act
        if act.op == Op.CALL:
            return act["callee"]
        if act["module"] is not None:
            return act["module"]
        if m.kind == "gelu":
            return "None"
        if isinstance(act.node, cst.Call):
            return Node(act.node.func)
        return self._callable(SILU)

    def _callable(self, qualified: str) -> Optional[str]:
        """Source that names the function ``qualified`` through the module's own imports."""
        for local, bound in self.ctx.names.imports.items():
            for prefix in bound:
                if qualified == prefix or qualified.startswith(prefix + "."):
                    return local + qualified[len(prefix):]
        return None

    def _approximate(self, m: Gated) -> str:
        value = m.act["approximate"]
        return code(value.node) if value is not None and value.node is not None else '"none"'

    def _cast(self, cast) -> Optional[str]:
        node = cast.node
        if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)):
            return None
        dtype = cast["dtype"]
        if node.args and not (dtype is not None and dtype.op == Op.NAME):
            return None
        return code(node.func.attr) + "(" + ", ".join(code(a) for a in node.args) + ")"

    def _up_first(self, m: Gated) -> bool:
        order = self._order(m.product.view)
        g, u = order.get(id(m.gate.node)), order.get(id(m.up.node))
        return g is not None and u is not None and u < g

    def _order(self, view) -> Dict[int, int]:
        found = getattr(view, "_source_order", None)
        if found is None:
            found = view._source_order = {id(n): i for i, n in enumerate(self.ctx.tree.subtree(view.func))}
        return found

    # -- where it goes ------------------------------------------------------------------------------
    def _rewrite(self, m: Gated, view) -> Optional[Refusal]:
        parents = self.ctx.tree.parents()
        block, index = enclosing_block(m.product.node, parents)
        if block is None:
            return unplaced("the product is not inside a block of statements")
        kept = [*([m.gate, m.up] if m.form == "operands" else [m.source, *m.modules, *m.weights]),
                m.act["module"], m.act["callee"]]
        kept = [v for v in kept if v is not None]
        feeders: Set[int] = set()
        outside = []
        for value in interior(m.product, kept):
            if not view.home(value) or inside(value.node, m.product.node, parents):
                continue
            at = _statement_index(block, value.node, parents)
            if at is None:
                outside.append(value)
            else:
                feeders.add(at)
        if outside:
            return self._optional_up(m, view, block, index, parents)
        # the statements that compute the operands themselves fold into the call too, when nothing else reads them
        own = {at for at in (_statement_index(block, v.node, parents) for v in kept
                             if view.home(v) and not inside(v.node, m.product.node, parents)) if at is not None and at < index}
        # (a split only makes views: its statement may stay when its halves are read elsewhere)
        options = [feeders | own, feeders] + ([set()] if m.form == "halves" else [])
        first = None
        for folded in options:
            # the call runs where the folded statements were: names are read as before the first of them
            here = view.env_before.get(id(block.body[min(folded, default=index)]), {})
            problem = removable(view, block, sorted(folded), index, m.product.node)
            made = problem or self._call(m, lambda v: operand(view, v, block, folded, here, m.product.node, parents))
            if not isinstance(made, Refusal):
                feeders = folded
                break
            first = first or made
        else:
            return first
        text, holes, what = made
        if m.form not in ("halves", "operands"):
            what = what[:-1] + " in separate statements)" if feeders else what.replace("(gate", "(separate gate")
        in_place(self, m.product.node, Written("", text, self._message(m, what), holes=tuple(holes.items())),
                 target=self._target(m), helpers=[HELPER], folded=(block, min(feeders), index) if feeders else None)
        return None

    @staticmethod
    def _target(m: Gated) -> str:
        return "torch_npu.npu_geglu" if m.kind == "gelu" else "torch_npu.npu_swiglu"

    def _message(self, m: Gated, label: str) -> str:
        shown = self._target(m)
        if m.kind == "silu":
            proof = "SiLU proven"
        elif m.kind == "gelu":
            proof = "GELU proven, its approximation passed on"
        else:
            shown = "torch_npu.npu_swiglu / npu_geglu"
            proof = f"`{code(self._act(m).node)}` checked to be SiLU or GELU at run time"
        if m.second:  # npu_geglu activates either half (activate_left); npu_swiglu only the first
            proof += {"silu": "; the halves swapped into [gate | up] by a copy per call",
                      "gelu": "; npu_geglu's activate_left set to activate the second half"}.get(
                m.kind, "; for SiLU the halves swapped by a copy per call, for GELU npu_geglu's activate_left set")
        return f"{label} → {shown} (guarded: {proof}; original kept)"

    def _optional_up(self, m: Gated, view, block, index, parents) -> Optional[Refusal]:
        """``h = act(gate(x))`` then ``if flag: h = h * up(x)``: a guarded region over both statements
        whose fused branch computes the gated product when the flag holds. None when done, else why not."""
        stmt = block.body[index]
        holder = parents.get(id(block))
        outer, at = enclosing_block(holder, parents) if isinstance(holder, cst.If) else (None, -1)
        if outer is None or holder.orelse is not None or len(block.body) != 1 or m.form == "halves":
            return unplaced("part of it is computed in another block")
        target = assigned(stmt)
        act_stmt = at - 1
        if target is None or act_stmt < 0 or assigned(outer.body[act_stmt]) != target \
                or view.values.get(id(outer.body[act_stmt].body[0].value)) is not m.act:
            return unplaced("part of it is computed in another block")
        here = view.env_before.get(id(outer.body[act_stmt]), {})
        made = self._call(m, lambda value: operand(view, value, outer, {act_stmt}, here, None, parents,
                                                    moved=(outer.body[act_stmt], stmt)))
        if isinstance(made, Refusal):
            return made
        text, holes, what = made
        act = self._act(m)
        guard = sited(f"{HELPER}.is_glu({atom(code(act.node)) if not isinstance(act, str) else act})", ["{flag}"])
        message = self._message(m, f"{what.split(' (')[0]} (gate and up projections, up under `{code(holder.test)}`)")
        written = Written(guard, text, message, outputs=(target,), holes=(*holes.items(), ("flag", holder.test)))
        return place(self, view.func.body, Slice(view, outer, act_stmt, at + 1, ()), written, note=None,
                     target=self._target(m), helpers=[HELPER], anchor=m.product.node)
