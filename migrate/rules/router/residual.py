"""The MoE router family's residual detector: top-k over softmax or sigmoid expert scores (or a
softmax over the top-k logits)."""

from __future__ import annotations

from typing import List

import libcst as cst

from .._residual import Family, peel, values
from ...triage import computes
from ...view import Value, View
from ...view.ops import Op


def _weights_discarded(view: View, topk: Value) -> bool:
    """``_, experts = topk(...)``: only the indices are used (an auxiliary load-balancing loss that
    counts assignments, not a router that weighs experts)."""
    parent = view.parents.get(id(topk.node))
    if isinstance(parent, cst.Assign) and isinstance(parent.targets[0].target, cst.Tuple):
        first = parent.targets[0].target.elements[0].value
        return isinstance(first, cst.Name) and first.value == "_"
    return False


def _router(view: View) -> List[Value]:
    found = []
    for value in values(view, Op.TOPK):
        largest = value["largest"]
        if largest is not None and largest.op == Op.CONST and largest.number == 0:
            continue  # the k smallest: not a choice of experts
        if _weights_discarded(view, value) and peel(value.input) is not None and peel(value.input).op != Op.ADD:
            continue  # (a biased choice discards its top-k values too: its weights are gathered from the scores)
        scores = peel(value.input)
        if scores is not None and scores.op == Op.ADD:  # sigmoid scores plus a bias
            scores = peel(scores.input) if peel(scores.input).op == Op.SIGMOID else peel(scores["other"])
        if scores is not None and scores.op in (Op.SOFTMAX, Op.SIGMOID):
            found.append(value)
    for value in values(view, Op.SOFTMAX):  # top-k first, softmax over the top-k logits
        source = peel(value.input)
        if source is not None and source.op == Op.ITEM and peel(source.input) is not None \
                and peel(source.input).op == Op.TOPK:
            found.append(value)
    return found


FAMILY = Family(
    "router", __package__, "pattern.router.unrecognised",
    frozenset({"topk"}), _router, lambda v: "top-k over softmax/sigmoid expert scores",
    computes=lambda words, function: computes(words, function, Op.TOPK)
    and (computes(words, function, Op.SOFTMAX) or computes(words, function, Op.SIGMOID)),
)
