"""NPU340/NPU341: MoE routers → torch_npu's gating kernels, guarded, the original kept as fallback (the
matcher is ``router._match``), or reported with a plan. Each code's page is its part below.

# NPU340
## What it does
Finds MoE routers on the dataflow view (across statements and inlined helper methods) in functions
that name an expert, router, gate or MoE, and turns the statements that compute them into a guarded
region `if npu_glue.<check>(...): <kernel call> else: <the original statements>`:

* softmax → top-k (`topk(softmax(logits), k)`; Mixtral, Qwen-MoE, OLMoE, DBRX) →
  `torch_npu.npu_moe_gating_top_k_softmax(logits, None, k=k)`; a renormalisation that follows stays
  after the region, on both paths. When the full probabilities are read afterwards (an auxiliary
  load-balancing loss) the kernel is `npu_moe_gating_top_k_softmax_v2(logits, k=k,
  output_softmax=True)`, whose third output replaces them;
* top-k → softmax over the k logits (mistral-inference, litgpt, GPT-OSS, Granite, Aria) →
  `npu_moe_gating_top_k_softmax_v2(logits, k=k, renorm=1)`;
* sigmoid (or softmax) scores plus a selection bias, optionally limited to the `k_group` best of
  `group_count` groups (scored by max or top-2 sum, dropped groups masked with -inf or 0), weights
  gathered from the unbiased scores, renormalised (`w / (w.sum(-1, keepdim=True) + eps)`, also under
  a flag such as `if self.norm_topk_prob:`, which joins the guard) and scaled
  (`routed_scaling_factor`) (DeepSeek-V3, GLM-4-MoE, MiniMax-M2, litgpt's `GroupedTopkRouter`) →
  `npu_moe_gating_top_k(logits, k, bias=..., k_group=..., group_count=..., group_select_mode=...,
  norm_type=1, routed_scaling_factor=..., eps=...)`, with `out_flag=True` when the scores are read
  later.

## Why
One kernel replaces the scores, the group selection, the top-k, the gather and the renormalisation.

## Fix safety
The region passes the def-use check (the fused side reads nothing the moved statements define; names
read afterwards are defined on both paths). Outputs match the original's: indices int32 → int64,
weights in the dtype the original computed them in (the logits are cast as its `.float()` or softmax
`dtype=` did), scores from the kernel cast back from float32. `npu_moe_gating_top_k_softmax(_v2)`
have no backward on a real NPU: their guard keeps training on the original code.
`npu_moe_gating_top_k` is differentiable in x and also runs in training, unless its scores are read
(they have no gradient). The guard checks at run time the kernel's limits (2-D logits, at most 2048
experts, divisible groups, k <= k_group * E / group_count, a bias [E] in the kernel input's dtype, a
Python-number scaling factor, group score by max or top-2 sum); dropped groups filled with 0 (not
-inf) agree only with a bias >= 0, checked on every call (one host synchronisation: the bias is a
trained parameter or buffer, updated by steps no version counter sees). Routers whose top-k is
unsorted (`sorted=False`) may get their experts in another order (the order of an unsorted top-k is
unspecified, and each weight stays with its expert); exact ties between experts may be broken
differently (the kernel prefers the lower index). The kernel's eps (1e-20) is used where the
original renormalises without one: equal unless the chosen scores sum below about 1e-12.

## Known problems
Routers whose logits or k are expressions, or parts of which run inside a branch (`if
self.topk_method == ...:`), are reported (NPU341).

# NPU341
## What it does
Reports routers (a top-k over expert scores, found by dataflow alone: no class, function or variable
name decides) that NPU340 leaves as they are, with the reason:

* softmax or top-k over another dim than the experts' (expert choice: top-k over tokens);
* experts chosen by scores that are not softmax or sigmoid of the logits (+ a bias): a bias added to
  the logits, a score module (`moe_statics`), shared-expert slices, an activation known only at run
  time;
* weights that are the top-k of the biased or masked selection scores;
* sigmoid weights not renormalised right after the gather (npu_moe_gating_top_k always
  renormalises);
* a sigmoid/softmax computed after a top-k of the raw logits in another form (Llama-4 scatters them
  back);
* routers partly inside a branch or loop, logits or k that are expressions, and regions the def-use
  check refuses (each with the check's reason).

## Why
The three gating kernels compute fixed formulas (softmax then top-k; top-k then softmax;
sigmoid/softmax scores + bias with group selection, gather, renormalisation, scaling); anything else
would change the result.

## Fix safety
Nothing is changed; the original runs on the NPU unfused. Plans: compute the router in one of the
kernels' forms (name the logits first, keep the scores' transform out of the choice, renormalise
sigmoid weights), then run migrate again and check with migrate parity. Each reason's plan is a
named plan of `opmap/moe.yaml` (`migrate ops show moe.scores`, ...).

## Known problems
Routers without a top-k (Phi-MoE's sparsemixer) are not recognised as routers.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Union

import libcst as cst

from ...context import HELPER
from ...diagnostics import DiagnosticCode
from ...parens import atom
from ...refusal import Refusal, RefusalKind, unavailable, unbound
from ...view.values import number
from ...view.emit import Written, place, sited
from ...view.regions import Slice, operand_code, statement_of
from ._region import TEMP, bound, branching, env_after, home_node, named, router_slice, tail_of
from ._match import Router, routers_in
from ...view.build import INLINE_DEPTH
from ...view.scope import closure, module_functions
from ...view.spellings import CAST_METHODS
from ...view.syntax import code
from .._table import TORCH_NPU
from ..base import Rule
from ....opmap import plan
from ...view.ops import Op

REPORT = "NPU341"
NOTE = "npu-migrate NPU340: fused MoE gating where npu_glue proves it exact, else the original"
MOVED_PLAN = plan("moe.moved")
KERNELS = {"softmax": "torch_npu.npu_moe_gating_top_k_softmax", "topk_softmax": "torch_npu.npu_moe_gating_top_k_softmax_v2",
           "grouped": "torch_npu.npu_moe_gating_top_k"}
ARITHMETIC = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.DIV: "/", Op.FLOORDIV: "//"}


TOPK = "topk"  # a router's function names it (torch.topk, .topk, a helper)


class MoeGating(Rule):
    declarations = (
        DiagnosticCode("NPU340", "moe-gating",
                       "MoE routers (softmax/sigmoid scores, bias, group-limited top-k) → torch_npu MoE gating "
                       "kernels (guarded)", rewrites=True, example="moe_gating_mixtral", doc=__doc__),
        DiagnosticCode(REPORT, "moe-gating-unfused",
                       "MoE routers the gating kernels cannot express (reported, not rewritten)",
                       example="moe_gating_reported", doc=__doc__),
    )
    triggers = (b"topk",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        # top-k nodes already handled: id(node) where it is written, (id(node), id(call)) for a helper's top-k
        # read where a call inlines it (a helper is read alone and at each call)
        self._done: Set[object] = set()
        self._blocked: Dict[object, tuple] = {}  # (refusal, site) reported at the end of the file, unless fused
        self._functions: Optional[Dict[str, cst.FunctionDef]] = None  # the module's functions bound once

    @classmethod
    def may_find(cls, words) -> bool:
        """The test of ``visit_FunctionDef`` for some function (with the helpers it calls)."""
        return any(any(TOPK in name for name in words.reach(f).names) for f in words.functions)

    def leave_Module(self, node: cst.Module) -> None:
        parents = self.ctx.tree.parents()
        fused_somewhere = {key[0] if isinstance(key, tuple) else key for key in self._done}
        for key, (match, site) in self._blocked.items():
            if key not in self._done and (isinstance(key, tuple) or key not in fused_somewhere):
                self.report(statement_of(site, parents), match.reason, fallback=match.fallback, code=REPORT)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self.ctx.is_helper:
            return
        if not any(TOPK in name for name in self._reach(node)):
            return  # (what decides is the dataflow below: no name of a class, function or variable)
        view = self.ctx.view(node)
        for match in routers_in(view):
            where = match.topk.node if isinstance(match, Router) else match.node
            if where is None or self.ctx.migrated(where) or id(where) in self._done or self._migrated_here(match, view):
                continue  # (fused where it is written: its callers call it as it is now)
            site = self._site(match, view)  # a helper's top-k inlined here: each call of it is its own site
            key = id(where) if site is where else (id(where), id(site))
            if key in self._done:
                continue
            if isinstance(match, Refusal):
                self._blocked.setdefault(key, (match, site))
                continue
            self._done.add(key)
            problem = self._fuse(match, view)
            if problem is not None:
                anchor = statement_of(site, self.ctx.tree.parents())
                self.report(anchor, f"MoE router not fused: {problem}", fallback=MOVED_PLAN, code=REPORT)

    def _site(self, match, view) -> cst.CSTNode:
        """Where the router is in this function: its top-k, or the call of the helper that holds it."""
        if isinstance(match, Refusal):
            return match.root or match.node
        if view.home(match.topk):
            return match.topk.node
        return home_node(view, match.topk, self.ctx.tree.parents()) or match.topk.node

    def _reach(self, func: cst.FunctionDef) -> Set[str]:
        """The names ``func`` reads and those of the helpers of this module it may call (module functions
        bound once, methods of its class: the view inlines them, up to its depth)."""
        if self._functions is None:
            self._functions = module_functions(self.ctx.module)
        cls, _ = closure(func, self.ctx.tree.parents())
        methods = {s.name.value: s for s in cls.body.body if isinstance(s, cst.FunctionDef)} \
            if cls is not None and isinstance(cls.body, cst.IndentedBlock) else {}
        found, frontier, seen = set(), [func], set()
        for _ in range(INLINE_DEPTH + 1):
            names = set().union(*(self.ctx.tree.names(f.body) for f in frontier if id(f) not in seen))
            seen.update(id(f) for f in frontier)
            found |= names
            frontier = [f for n in names for f in (self._functions.get(n), methods.get(n)) if f is not None]
        return found

    def _migrated_here(self, match, view) -> bool:
        """A router whose values in this function lie in code this tool emitted (a helper it calls,
        such as a ``get_topk_indices`` method, is outside the guard: its fallback call is not)."""
        if not isinstance(match, Router):
            return False
        values = [match.weights, match.indices, match.probs, *match.values]
        return any(v is not None and v.node is not None and view.home(v) and self.ctx.migrated(v.node) for v in values)

    # -- one router ------------------------------------------------------------------------------
    def _fuse(self, r: Router, view) -> Optional[Refusal]:
        parents = self.ctx.tree.parents()
        operands = [v for v in (r.logits, r.k, r.bias, r.experts, r.scale, r.eps, r.dim, *r.flags) if v is not None]
        if r.groups is not None:
            operands += [v for v in (r.groups.count, r.groups.size, r.groups.k_group, r.groups.top) if v is not None]
        why = None
        for with_probs in (False, True):
            outputs = [v for v in (r.weights, r.indices, r.probs if with_probs else None) if v is not None]
            piece = router_slice(view, outputs, operands, parents)
            if isinstance(piece, Refusal):
                return piece
            branch = branching(r, piece)
            if branch is not None and r.probs is not None and not with_probs:
                # the scores are computed before a branch the rest is in (DeepSeek-V2's topk_method): the
                # region starts after them inside the branch; the kernel computes them again from the logits
                piece = router_slice(view, outputs, [*operands, r.probs], parents)
                branch = branch if isinstance(piece, Refusal) else branching(r, piece)
            if branch is not None:
                return branch
            written = self._code(r, piece, with_probs)
            if isinstance(written, Refusal):
                return why or written
            kernel = KERNELS[r.kind] + ("_v2" if r.kind == "softmax" and with_probs else "")
            anchor = statement_of(r.topk.node, self.ctx.tree.parents()) if piece.view.home(r.topk) else None
            why = place(self, view.func.body, piece, written, note=NOTE, target=kernel, imports=[TORCH_NPU],
                        helpers=[HELPER], anchor=anchor)
            if why is None:
                return None
            if why.kind is not RefusalKind.READ_AFTER_ORIGINAL_ONLY or r.probs is None or with_probs:
                return why  # (the scores read afterwards: the kernel that gives them is tried next)
        return why

    def _message(self, r: Router, piece: Slice, with_probs: bool) -> str:
        k = operand_code(piece, r.k)
        if r.kind == "softmax":
            form = "softmax → topk"
        elif r.kind == "topk_softmax":
            form = "topk → softmax"
        else:
            form = f"{r.norm} scores" + (" + bias" if r.bias is not None else "") + \
                   (", group-limited topk" if r.groups is not None else " → topk")
        kernel = KERNELS[r.kind] + ("_v2" if r.kind == "softmax" and with_probs else "")
        probs = "; the scores come from the kernel" if with_probs else ""
        probs += "; the cast of the scores checked to keep their dtype" if r.rounded is not None else ""
        training = "inference only; original kept for training" if r.kind != "grouped" or with_probs else \
            "shapes, groups and bias checked at run time; original kept otherwise"
        return f"MoE router {form} (k={k}) → {kernel} (guarded: {training}{probs})"

    # -- the guard and the fused statements -----------------------------------------------------------
    def _code(self, r: Router, piece: Slice, with_probs: bool) -> Union[Written, Refusal]:
        """The router written where the guard runs, or why it cannot be."""
        logits, x = named(piece, r.logits), self._kernel_input(r, piece)
        k = operand_code(piece, r.k)
        if logits is None or x is None or k is None:
            return unavailable("the router logits or k are not available as plain expressions where the router "
                               "starts")
        end = env_after(piece)
        names, tail = {}, []  # tail: the region's last statement rewritten around the kernel's weights
        probs = r.rounded or r.probs  # the scores as the code keeps them (cast, when it casts them)
        for role, value in (("weights", r.weights), ("indices", r.indices), ("probs", probs if with_probs else None)):
            if value is not None:
                names[role] = bound(piece, end, value)
                if names[role] is None and role == "weights":
                    names[role], tail = TEMP, tail_of(piece, value, TEMP)
                if names[role] is None or names[role] == TEMP and not tail:
                    return unbound(f"the router's {role} are not assigned to a name")
        w, i, p = names.get("weights", "_"), names.get("indices", "_"), names.get("probs", "_")
        dim = self._text(piece, r.dim) if r.dim is not None else "-1"
        if dim is None:
            return unavailable("the softmax dim is not available where the router starts")
        if r.kind == "softmax" and not with_probs:
            guard = f"{HELPER}.moe_gating_fits({logits}, {k}, dim={dim})"
            call = f"torch_npu.npu_moe_gating_top_k_softmax({x}, None, k={k})"
        elif r.kind == "softmax":
            guard = f"{HELPER}.moe_softmax_v2_fits({logits}, {k}, dim={dim})"
            call = f"torch_npu.npu_moe_gating_top_k_softmax_v2({x}, k={k}, output_softmax=True)"
        elif r.kind == "topk_softmax":
            guard = f"{HELPER}.moe_softmax_v2_fits({logits}, {k}, dim={dim})"
            call = f"torch_npu.npu_moe_gating_top_k_softmax_v2({x}, k={k}, renorm=1)"
        else:
            parts = self._grouped(r, piece, with_probs)
            if isinstance(parts, Refusal):
                return parts
            checks, args = parts
            dtype = f"{logits}.dtype"
            if x != logits:  # the kernel sees the logits cast: the bias must fit that dtype
                dtype = self._dtype_text(piece, r.logits, r.dtype)
                if dtype is None:
                    return unavailable("the dtype the router's scores are computed in is not a plain name")
                checks.append(f"dtype={dtype}")
            # scores + bias promote the bias to the scores' dtype (guarded to be exact): the kernel gets it so
            args = [f"{a}.to({dtype})" if a.startswith("bias=") else a for a in args]
            guard = f"{HELPER}.moe_top_k_fits({', '.join([logits, k, *checks])})"
            call = f"torch_npu.npu_moe_gating_top_k({', '.join([x, k, *args])})"
        flags = []
        for flag in r.flags:
            text = self._text(piece, flag)
            if text is None:
                return unavailable("the flag of its renormalisation is not available where the router starts")
            flags.append(text)
        if r.rounded is not None:  # exact when the cast keeps the dtype the kernel computes the scores in
            kept = self._dtype_text(piece, r.rounded, None)
            computed = self._dtype_text(piece, r.logits, r.dtype) if x != logits else f"{logits}.dtype"
            if kept is None or computed is None:
                return unavailable("the dtype the router's scores are cast to is not a plain name")
            flags.append(f"{kept} == {computed}")
        after = ([f"{i} = {i}.long()\n"] if i != "_" else []) + ([f"{p} = {p}.to({x}.dtype)\n"] if p != "_" else [])
        return Written(sited(guard, flags), call, self._message(r, piece, with_probs),
                       outputs=tuple("" if name == "_" else name for name in (w, i, p)), after=(*after, *tail))

    def _grouped(self, r: Router, piece: Slice, with_probs: bool):
        checks: List[str] = []
        args: List[str] = []

        def both(name: str, value, check: bool = True, arg: bool = True) -> bool:
            if value is None:
                return True
            text = self._text(piece, value)
            if text is None:
                return False
            checks.extend([f"{name}={text}"] if check else [])
            args.extend([f"{name}={text}"] if arg else [])
            return True

        ok = both("bias", r.bias) and both("experts", r.experts, arg=False)
        g = r.groups
        if g is not None:
            ok = ok and both("k_group", g.k_group) and both("group_count", g.count) \
                and (number(g.size) == -1 or both("group_size", g.size, arg=False))
            if g.top is None or number(g.top) in (1, 2):
                args.append(f"group_select_mode={0 if g.top is None or number(g.top) == 1 else 1}")
            else:
                top = self._text(piece, g.top)
                ok = ok and top is not None
                checks.append(f"group_top={top}")
                args.append(f"group_select_mode={top} - 1")
            if g.fill == "0":
                checks.append("zero_filled=True")
        if r.norm == "sigmoid":
            args.append("norm_type=1")
        ok = ok and both("routed_scaling_factor", r.scale) and both("eps", r.eps, check=False)
        if with_probs:
            checks.append("norm_out=True")
            args.append("out_flag=True")
        if not ok:
            return unavailable("an input of the router (bias, groups, scale or eps) is not available where the "
                               "router starts")
        return checks, args

    def _text(self, piece: Slice, value) -> Optional[str]:
        """Source for an input where the guard runs; arithmetic of such inputs (``n_expert // n_group``
        read in an inlined helper) is written from its parts."""
        if value.op == Op.CONST and value.node is not None:
            return atom(code(value.node))
        text = operand_code(piece, value)
        if text is None and value.op in ARITHMETIC and value.input is not None and value["other"] is not None:
            left, right = self._text(piece, value.input), self._text(piece, value["other"])
            if left is not None and right is not None:
                return atom(f"{left} {ARITHMETIC[value.op]} {right}")
        return text

    def _kernel_input(self, r: Router, piece: Slice) -> Optional[str]:
        """The logits as the original's scores see them: its casts, then the softmax ``dtype=``."""
        casts = []
        value = r.logits
        while value.op == Op.CAST and operand_code(piece, value) is None:
            casts.append(value)
            value = value.input
        text = operand_code(piece, value)
        for cast in reversed(casts):
            suffix = self._cast(piece, cast["dtype"] or cast["other"], cast["other"] is not None)
            if text is None or suffix is None:
                return None
            text += suffix
        if r.dtype is not None and text is not None:
            suffix = self._cast(piece, r.dtype, False)
            text = text + suffix if suffix is not None else None
        return text

    def _dtype_text(self, piece: Slice, value, softmax_dtype) -> Optional[str]:
        """The dtype of the kernel's input (the logits after their casts and the softmax's ``dtype=``)."""
        like = softmax_dtype is None and value.op == Op.CAST and value["other"] is not None
        dtype = softmax_dtype if softmax_dtype is not None else value["other"] if like else \
            value["dtype"] if value.op == Op.CAST else None
        if dtype is None:
            return None
        if like:
            other = operand_code(piece, dtype)
            return f"{other}.dtype" if other is not None else None
        if dtype.node is not None:
            return atom(code(dtype.node)) if dtype.op == Op.NAME else operand_code(piece, dtype)
        return self._spelled(dtype.name)

    def _spelled(self, qualified: Optional[str]) -> Optional[str]:
        """``torch.float32`` through the module's own import of torch."""
        for local, qualified_names in self.ctx.names.imports.items():
            if "torch" in qualified_names and qualified and qualified.startswith("torch."):
                return local + qualified[len("torch"):]
        return None

    def _cast(self, piece: Slice, dtype, like: bool) -> Optional[str]:
        if dtype is None:
            return None
        if like:
            other = operand_code(piece, dtype)
            return f".type_as({other})" if other is not None else None
        if dtype.op == Op.NAME and dtype.name in CAST_METHODS.values() and dtype.node is None:
            method = next(m for m, d in CAST_METHODS.items() if d == dtype.name)
            return f".{method}()"
        if dtype.op == Op.NAME and dtype.name in ("torch.float32", "torch.float"):
            return ".float()"
        text = operand_code(piece, dtype) if dtype.node is None or dtype.op != Op.NAME else atom(code(dtype.node))
        return f".to({text})" if text is not None else None
