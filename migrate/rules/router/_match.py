"""MoE routers on the dataflow view: a top-k over expert scores that picks each token's experts, and
the weights the experts' outputs are scaled by. Three kinds, one per torch_npu kernel:

* ``softmax``: ``topk(softmax(logits))`` (weights = the top-k probabilities; a renormalisation after it
  stays after it) → ``npu_moe_gating_top_k_softmax`` (``_v2`` with ``output_softmax=True`` when the full
  probabilities are read afterwards, e.g. by an auxiliary loss);
* ``topk_softmax``: ``topk(logits)`` then a softmax over the k values (renormalised over the top-k)
  → ``npu_moe_gating_top_k_softmax_v2(renorm=1)``;
* ``grouped``: sigmoid (or softmax) scores, plus a selection bias, optionally limited to the best
  groups of experts (``router._groups``), the weights gathered from the unbiased scores, renormalised
  (``w / (w.sum(-1, keepdim=True) + eps)``, possibly under a flag) and scaled
  (``routed_scaling_factor``) → ``npu_moe_gating_top_k``.

``routers_in(view)`` returns a ``Router`` per top-k that is a router, or a ``Refusal`` one (why the
kernels cannot express it, with a plan). What is a router is read from the dataflow alone, never from
the names of classes, functions or variables: the same code gives the same match under any name. A
top-k of values no softmax or sigmoid computed is not one (top-k sampling of raw logits); a softmax →
top-k anywhere is computed exactly by the gating kernel, whatever the code calls it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple, Union

import libcst as cst

from ...refusal import Refusal, blocked
from ...view.values import number
from ._groups import Groups, masked
from ._region import home_node
from ._scores import across_dims, biased, chosen_by, from_parameter, mentions_scores, recast
from ...view import Value, View
from ....opmap import plan
from ...view.ops import Op


PLANS = {"dims": plan("moe.dims"), "scores": plan("moe.scores"), "renorm": plan("moe.renorm")}


@dataclass
class Router:
    topk: Value
    kind: str  # "softmax", "topk_softmax", "grouped"
    logits: Value  # the kernel's x: the input of the scores' softmax/sigmoid, or of the top-k
    k: Value
    weights: Optional[Value]  # the value the kernel's first output stands for (None: not read)
    indices: Optional[Value]
    probs: Optional[Value] = None  # the scores over all experts (for kernels that can return them)
    norm: str = "softmax"  # the scores: "softmax" or "sigmoid"
    dim: Optional[Value] = None  # the softmax's dim (checked at run time)
    dtype: Optional[Value] = None  # the softmax's dtype argument
    bias: Optional[Value] = None
    groups: Optional[Groups] = None
    experts: Optional[Value] = None  # scores reshaped to (-1, experts) before the bias
    rounded: Optional[Value] = None  # a cast of the scores before the choice (``.type_as(logits)``): checked to keep their dtype
    scale: Optional[Value] = None
    eps: Optional[Value] = None
    renormalised: bool = False
    flags: Tuple[Value, ...] = ()  # run-time tests under which the code computes what the kernel does
    values: List[Value] = field(default_factory=list)  # every value of the router (for the region)


Match = Union[Router, Refusal]


def routers_in(view: View) -> List[Match]:
    """Every router of the function and of the helpers inlined into it (memoised on the view)."""
    found = getattr(view, "_routers", None)
    if found is None:
        found = []
        graph = _Graph(view)
        for value in graph.values:
            if value.op == Op.TOPK:
                match = _router(value, graph)
                if isinstance(match, Refusal) and not view.home(value):  # a helper's: point at its call here
                    match = Refusal(match.kind, match, match.name, node=match.node, fallback=match.fallback,
                                    root=home_node(view, value, view.parents))
                if match is not None:
                    found.append(match)
        view._routers = found
    return found


def _bound_items(topk: Value, parents) -> Optional[List[int]]:
    """The items ``w, i = topk(...)`` binds to names (the indices among them), else None."""
    parent = parents.get(id(topk.node)) if topk.node is not None else None
    if not (isinstance(parent, cst.Assign) and isinstance(parent.targets[0].target, cst.Tuple)):
        return None
    names = [e.value.value if isinstance(e.value, cst.Name) else None for e in parent.targets[0].target.elements]
    if len(names) != 2 or names[1] in (None, "_"):
        return None
    return [i for i, name in enumerate(names) if name not in (None, "_")]


class _Graph:
    """Every value reachable from the function's own values (inlined helpers included), and who uses each."""

    def __init__(self, view: View) -> None:
        self.parents = view.parents
        self.values: List[Value] = []
        self.users: Dict[int, List[Value]] = {}
        seen = set()
        stack = list(view.values.values())
        while stack:
            value = stack.pop()
            if id(value) in seen:
                continue
            seen.add(id(value))
            self.values.append(value)
            for child in (*value.kw.values(), *value.items):
                self.users.setdefault(id(child), []).append(value)
                stack.append(child)

    def uses(self, value: Value) -> List[Value]:
        return self.users.get(id(value), [])

    def items(self, value: Value, index: int) -> List[Value]:
        return [u for u in self.uses(value) if u.op == Op.ITEM and u.number == index]


def _router(topk: Value, graph: _Graph) -> Optional[Match]:
    largest = topk["largest"]
    if largest is not None and not (largest.op == Op.CONST and largest.number == 1):
        return None  # the k smallest: not a choice of experts
    indices = graph.items(topk, 1)
    firsts = graph.items(topk, 0)
    if not indices:
        bound = _bound_items(topk, graph.parents)
        if bound is None:
            return None
        # bound by ``a, b = topk(...)``, then lost to the view (set on one path of an if only): the
        # statement's names stand for them, whatever reads them later
        made = [Value(Op.ITEM, {"input": topk}, view=topk.view, number=i) for i in bound]
        indices = [Value(Op.ITEM, {"input": topk}, view=topk.view, number=1)]
        firsts = firsts or [item for item in made if item.number == 0]  # (the values, when something reads them)
    if any(use.op == Op.SCATTER and use["index"] is index and number(use["src"]) == 1
           for index in indices for use in graph.uses(index)):
        return None  # the groups chosen for a group-limited router (a mask of ones), not the experts
    selection = topk.input
    groups = None
    found = masked(selection) if selection is not None else None
    if found is not None:
        groups, selection = found
    scores, bias, experts, rounded = biased(selection)
    if scores is None and selection.op == Op.ADD and from_parameter(selection):
        return None  # a helper choosing from scores its caller computes: read where it is inlined
    if scores is None:
        if groups is None and selection.op != Op.ADD and not mentions_scores(selection):
            return _topk_softmax(topk, graph, indices, firsts)
        if across_dims(selection):
            return None  # one top-k over several dims of the scores (detection post-processing): no choice per row
        return blocked(topk.node, f"MoE router not fused: {chosen_by(selection, _argument(topk))}", PLANS["scores"])
    if not _last(topk["dim"], default=True) or (scores.op == Op.SOFTMAX and not _last(scores["dim"])):
        return blocked(topk.node, "MoE router not fused: softmax/top-k not over the experts' (last) dim", PLANS["dims"])
    # the top-k values are the unbiased scores (masked experts, -inf or 0 below every kept score, are never chosen)
    weights = _gathered(rounded or scores, indices[0], graph) or (firsts[0] if firsts and bias is None else None)
    weights = recast(weights, rounded, graph)
    if weights is None and any(graph.uses(first) for first in firsts):
        return blocked(topk.node, "MoE router not fused: its weights are the top-k of the biased or masked selection "
                                  "scores, which no gating kernel returns", PLANS["scores"])
    router = Router(topk, "softmax", scores.input, topk["k"], weights, indices[0], probs=scores, norm=scores.op,
                    dim=_checked_dim(scores["dim"], topk["dim"]), dtype=_dtype(scores), bias=bias, groups=groups,
                    experts=experts, rounded=rounded)
    if scores.op == Op.SOFTMAX and groups is None and bias is None:
        return router
    router.kind = "grouped"
    if weights is not None:
        refused = _weighting(router, graph)
        if refused is not None:
            return refused
    return router


def _argument(topk: Value) -> Optional[cst.CSTNode]:
    """The code of what the top-k chooses from: ``x`` of ``torch.topk(x, k)`` or of ``x.topk(k)``."""
    node = topk.node
    if not isinstance(node, cst.Call):
        return None
    if topk.view is not None and topk.view.scope.qualify(node.func) == "torch.topk":
        return node.args[0].value if node.args else None
    return node.func.value if isinstance(node.func, cst.Attribute) else None


def _last(dim: Optional[Value], default: bool = False) -> bool:
    """The dim is the last one: -1, or 1 (the last of 2-D logits, checked at run time)."""
    return default if dim is None else number(dim) in (-1, 1)


def _checked_dim(softmax_dim: Optional[Value], topk_dim: Optional[Value]) -> Optional[Value]:
    """The dim the guard checks to be the last: the top-k's when it is 1 (the last of 2-D logits only),
    else the softmax's (both are -1 or 1: ``_last``)."""
    return topk_dim if number(topk_dim) == 1 else softmax_dim


def _gathered(scores: Value, indices: Value, graph: _Graph) -> Optional[Value]:
    """``scores.gather(-1, indices)`` (any spelling)."""
    for use in graph.uses(indices):
        if use.op == Op.GATHER and use.input is scores and use["index"] is indices and _last(use["dim"]):
            return use
    return None


def _topk_softmax(topk: Value, graph: _Graph, indices, firsts) -> Optional[Match]:
    """``values, experts = topk(logits, k)`` then ``softmax(values)``."""
    softmaxes = [u for first in firsts for u in graph.uses(first) if u.op == Op.SOFTMAX]
    if len(softmaxes) != 1:
        merged = [u for first in firsts for phi in graph.uses(first) if phi.op == Op.PHI
                  for u in (phi, *_below(phi, graph, 2)) if u.op in (Op.SOFTMAX, Op.SIGMOID)]
        if merged:  # the top-k on one branch of an if, another value on the other, then the softmax
            return blocked(topk.node, f"MoE router not fused: the {merged[0].op} after the top-k reads its values "
                                      "from one branch of an `if` only (the other branch sets them otherwise)",
                           PLANS["scores"])
        later = [u for first in firsts for u in _below(first, graph, 3) if u.op in (Op.SOFTMAX, Op.SIGMOID)]
        if later:  # llama4: the top-k logits scattered back over all experts, then a sigmoid
            return blocked(topk.node, f"MoE router not fused: a {later[0].op} computed after the top-k of the raw "
                                      "logits, in a form no gating kernel computes", PLANS["scores"])
        return None
    softmax = softmaxes[0]
    if not (_last(topk["dim"], default=True) and _last(softmax["dim"])):
        return blocked(topk.node, "MoE router not fused: softmax/top-k not over the experts' (last) dim", PLANS["dims"])
    return Router(topk, "topk_softmax", topk.input, topk["k"], softmax, indices[0],
                  dim=_checked_dim(softmax["dim"], topk["dim"]), dtype=_dtype(softmax))


def _dtype(softmax: Value) -> Optional[Value]:
    """The softmax's ``dtype=``, None when it has none or names its input's own (``dtype=x.dtype``)."""
    dtype = softmax["dtype"]
    if dtype is not None and dtype.op == Op.ATTR and dtype.name == "dtype" and dtype.input is softmax.input:
        return None
    return dtype


def _below(value: Value, graph: _Graph, depth: int) -> List[Value]:
    """The values computed from ``value`` within ``depth`` steps."""
    found, frontier = [], [value]
    for _ in range(depth):
        frontier = [u for v in frontier for u in graph.uses(v)]
        found += frontier
    return found


def _weighting(router: Router, graph: _Graph) -> Optional[Refusal]:
    """Extend ``router.weights`` over its renormalisation and scaling, as npu_moe_gating_top_k computes
    them; a Refusal site when the code's weights differ from every form of the kernel."""
    weights = router.weights
    renormed = _renormalised(weights, graph)
    if renormed is not None:
        if router.norm == "softmax":  # the kernel leaves softmax weights as they are: the renorm stays after
            renormed = None
        else:
            weights, router.eps, flag = renormed
            router.renormalised = True
            router.flags += (flag,) if flag is not None else ()
    elif router.norm == "sigmoid":
        return blocked(router.topk.node, "MoE router not fused: the sigmoid weights are not renormalised right after "
                                         "they are gathered (npu_moe_gating_top_k renormalises them)", PLANS["renorm"])
    scaled = [u for u in graph.uses(weights) if u.op == Op.MUL and _scalar(u, weights)]
    if len(scaled) == 1 and len(graph.uses(weights)) == 1:
        weights, router.scale = scaled[0], _scalar(scaled[0], weights)
    router.weights = weights
    return None


def _scalar(product: Value, weights: Value) -> Optional[Value]:
    """The other factor of ``weights * c`` when it is a number or an attribute (a scaling factor)."""
    other = product["other"] if product.input is weights else product.input if product["other"] is weights else None
    if other is not None and (other.op == Op.CONST or (other.op == Op.ATTR and other.name != "weight")):
        return other
    return None


def _renormalised(weights: Value, graph: _Graph) -> Optional[Tuple[Value, Optional[Value], Optional[Value]]]:
    """(renormalised weights, eps, flag) for ``w / (w.sum(-1, keepdim=True) + eps)``, possibly under
    ``if flag:`` (then the value after the ``if``), else None."""
    for use in graph.uses(weights):
        if use.op != Op.DIV or use.input is not weights:
            continue
        total, eps = use["other"], None
        if total is not None and total.op == Op.ADD and total.input is not None and total.input.op == Op.SUM:
            total, eps = total.input, total["other"]
        if total is None or total.op != Op.SUM or total.input is not weights or not _last(total["dim"]):
            continue
        if total["keepdim"] is None or number(total["keepdim"]) != 1:
            continue
        phis = [u for u in graph.uses(use) if u.op == Op.PHI and u["then"] is use and u["else"] is weights]
        if phis:
            return phis[0], eps, phis[0]["test"]
        return use, eps, None
    return None
