"""NPU330/NPU331: gated MLPs → ``torch_npu.npu_swiglu`` (activates the first half) / ``npu_geglu``
(either half: ``activate_left``; the matcher is ``mlp._match``), or reported with a plan. Each code's page is its part below.

# NPU330
## What it does
Rewrites the gated product of an MLP, found on the dataflow view however it is spelled: `act(gate) *
up` or `up * act(gate)`, in one expression or over several statements (litgpt's `x_fc_1 =
self.fc_1(x)`, `x_fc_2 = self.fc_2(x)`, `x = F.silu(x_fc_1) * x_fc_2`), `x * torch.sigmoid(x)` as
SiLU, in loops over experts, in a function defined inside `forward` or a method it calls. `act` is
`F.silu`/`F.gelu`, an `nn.SiLU`/`nn.GELU` attribute, an attribute set to `F.silu` in `__init__`, or a
module only known at run time (`ACT2FN[config.hidden_act]`, `self.config.activation_func`, a
constructor argument such as torchtune's `activation`). No name decides: the same code under any
class, function or attribute name gives the same finding. The call emitted depends on the form (all in the vendored `npu_glue.py`):

* two projections of one input by modules (`self.gate_proj(x)`, `self.up_proj(x)`) →
  `npu_glue.swiglu_linear(act, self.gate_proj, self.up_proj, x)` (`geglu_linear` for a GELU,
  `glu_linear` for an activation known at run time): both modules called as the original calls them,
  their outputs concatenated, then the fused kernel;
* a fused projection split in two, `gate, up = self.gate_up_proj(x).chunk(2, dim=-1)` (also by
  index, `torch.chunk`, or with both halves cast) → `npu_glue.swiglu_halves(act,
  self.gate_up_proj(x))` (`geglu_halves`, `glu_halves`); the second half activated (`up, gate =
  ...`) → the same with `second=True`: npu_geglu's `activate_left` picks the half, npu_swiglu gets
  the halves swapped into [gate | up] (a copy, as for two projections);
* gate and up scaled before the product (`act(self.w1(x) * scale) * self.w3(x)`) →
  `npu_glue.swiglu(act, gate=..., up=...)` (`geglu`, `glu`) on the values the code computes, in its
  order;
* two einsum/matmul/bmm products of one input with two weights (expert MLPs, `einsum("ecd,edf->ecf",
  x, self.w1)`) → `npu_glue.swiglu_stacked(act, x, self.w1, self.w3)`: both products made as the
  original makes them, their outputs concatenated, then the fused kernel (training too);
* an up projection applied under a flag (torchtune's `h = self.activation(self.w1(x))` then `if
  self.w3 is not None: h = h * self.w3(x)`) → `if npu_glue.is_glu(self.activation) and self.w3 is
  not None: h = npu_glue.glu_linear(...)` with the original statements as the `else` branch.

Statements that only compute the operands fold into the call (their comments move above it); the
names they bind must be read nowhere else.

## Why
`npu_swiglu` and `npu_geglu` are single differentiable kernels for the activation and the product;
with the projections computed as one matmul the gated MLP costs one matmul and one element-wise
kernel, with no copy of the activations.

## Fix safety
npu_swiglu activates the first half, so the gate goes first (swapped by a copy for a split whose
second half is the gate); npu_geglu takes the half as `activate_left`. At run time the helpers check that the
activation is SiLU (`F.silu`, exactly `nn.SiLU`, transformers' `SiLUActivation`) or a GELU whose
approximation they can name (`F.gelu`/`nn.GELU` with "none" or "tanh", transformers' GELU classes),
that the two outputs have one shape and dtype; the projections are always called as the original
calls them, in its order (`up_first=True` when the code computes up first), so any module (hooks,
parametrizations, an overridden `forward`, LoRA wrappers) and any state change of its weights (fused
or foreach optimizer steps, `.data` writes, `load_state_dict`, tying, FSDP-style swaps) is seen;
otherwise they compute the original `act(gate) * up`. Nothing derived from the weights is kept
between calls (see `docs/design.md`, "Derived state": measured, a [gate; up] weight built per call
costs more than the activation copy, and one kept between calls goes stale under a fused optimizer
step). `npu_geglu`'s `activate_left` means opposite halves in different CANN versions' docs, so the
helper asks the kernel once per device which value activates the first half. Numerics: the kernels
round once where eager code rounds the activation before the product (~1 ulp in bfloat16/float16;
the op table records the tolerances).

## Known problems
Each call copies the gate and up activations once (`torch.cat`) for the kernel's one input. A GELU
known only at run time through a class the helper does not know (a custom module) runs unfused.
Products cast back after float32 math (`(act(gate.float()) * up.float()).to(gate.dtype)`) over
separate projections are not matched (the residual pass reports them).

# NPU331
## What it does
Reports gated MLPs (`act(gate) * up` of two projections of one input, or of the halves of one split
projection) that NPU330 leaves as they are, with the reason:

* a split that is not along the last dim;
* an activation with no fused kernel (ReLU, sigmoid, tanh gates);
* GeGLU over einsum/matmul products (npu_geglu would need a copy of both halves per call);
* F.linear projections with biases or einsums whose output's last dim is not the weight's own;
* a clamped SwiGLU (limits on the gate and up, as gpt-oss and DeepSeek-V4 write them):
  `npu_clipped_swiglu` computes it, but the emulated NPU cannot prove the rewrite;
* intermediate values read elsewhere in the function (folding the statements would change that
  read), or other statements between the projections and the product.

## Why
`npu_swiglu`/`npu_geglu` activate the first half of the last dim of one tensor, with SiLU or GELU
only; any other arrangement would compute something else.

## Fix safety
Nothing is changed; the original runs on the NPU unfused. Plans: for a reversed split, swap the two
halves of the projection weight (and bias) when loading the checkpoint; for a reused intermediate,
compute the projections in names read only by the product; for other activations keep the original
(composite). Each reason's plan is a named plan of `opmap/mlp.yaml` (`migrate ops show
mlp.gate_second`, ...).

## Known problems
Interleaved gate/up layouts (`gate_up[..., ::2]`, gpt-oss, clamped or not) are reported by the
residual pass rather than here.
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
from ....opmap import plan
from ...view.ops import Op

REPORT = "NPU331"
REUSE_PLAN = plan("mlp.reuse")
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
                       "at run time)", rewrites=True, example="swiglu_fused", doc=__doc__),
        DiagnosticCode(REPORT, "swiglu-unfused",
                       "gated MLPs the fused kernels cannot express exactly (reported, not rewritten)",
                       example="swiglu_reported", doc=__doc__),
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
