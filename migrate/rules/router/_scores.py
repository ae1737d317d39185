"""What a router's top-k chooses from, on the dataflow view: softmax or sigmoid scores of the logits,
plus a bias (``biased``), possibly cast first (``_rounded``: the weights gathered from them are cast
alike, ``recast``); and, where it is not that, the words that say what it is instead (``chosen_by``),
naming the code it reads. ``across_dims`` tells a top-k over scores flattened across dims (detection
post-processing), which chooses nothing per row."""

from __future__ import annotations

from typing import Optional, Tuple

from ...view import Value
from ...view.ops import Op
from ...view.syntax import code
from ...view.values import number, same_value


def biased(selection: Value) -> Tuple[Optional[Value], Optional[Value], Optional[Value], Optional[Value]]:
    """(scores, bias, experts, cast) for softmax/sigmoid ``scores + bias`` (``bias.unsqueeze(0)`` and
    ``scores.view(-1, E)`` looked through), (scores, None, None, cast) without a bias, else Nones;
    ``cast``: the scores cast before the choice (``softmax(x, dtype=float32).type_as(x)``), else None."""
    scores, rounded = _rounded(selection)
    if scores.op in (Op.SOFTMAX, Op.SIGMOID):
        return scores, None, None, rounded
    if selection.op != Op.ADD:
        return None, None, None, None
    for scores, bias in ((selection.input, selection["other"]), (selection["other"], selection.input)):
        experts = None
        if scores is not None and scores.op == Op.RESHAPE and scores["*rest"] is not None \
                and len(scores["*rest"].items) == 2 and number(scores["*rest"].items[0]) == -1:
            scores, experts = scores.input, scores["*rest"].items[1]
        if bias is not None and bias.op == Op.UNSQUEEZE and number(bias["dim"]) == 0:
            bias = bias.input
        if bias is not None and bias.op == Op.CAST:
            bias = bias.input
        scores, rounded = _rounded(scores) if scores is not None else (None, None)
        if scores is not None and scores.op in (Op.SOFTMAX, Op.SIGMOID) and not _mentions(bias, scores):
            return scores, bias, experts, rounded
    return None, None, None, None


def _rounded(value: Value) -> Tuple[Value, Optional[Value]]:
    """(scores, the cast) for a cast of softmax/sigmoid scores, else (value, None)."""
    if value.op == Op.CAST and value.input is not None and value.input.op in (Op.SOFTMAX, Op.SIGMOID):
        return value.input, value
    return value, None


def recast(weights: Optional[Value], rounded: Optional[Value], graph) -> Optional[Value]:
    """The weights through their one cast when it is to the dtype the scores were cast to (the identity:
    ``gather(scores, 1, i).type_as(logits)`` with ``scores = sigmoid(...).type_as(logits)``)."""
    uses = graph.uses(weights) if weights is not None and rounded is not None else []
    if len(uses) == 1 and uses[0].op == Op.CAST and uses[0].input is weights and _same_cast(uses[0], rounded):
        return uses[0]
    return weights


def _same_cast(a: Value, b: Value) -> bool:
    """Two casts to one dtype: ``type_as`` of one value, or one named dtype."""
    if a["other"] is not None or b["other"] is not None:
        return a["other"] is b["other"] or same_value(a["other"], b["other"])
    da, db = a["dtype"], b["dtype"]
    return da is not None and db is not None and da.op == db.op == Op.NAME and da.name == db.name


def from_parameter(selection: Value) -> bool:
    """``scores (+ bias)`` where the scores are the function's parameter (reshaped at most): no side
    is computed from a softmax or sigmoid here (``sigmoid(x) + bias`` with the bias a parameter is not)."""
    sides = (selection.input, selection["other"]) if selection.op == Op.ADD else (selection,)
    if any(mentions_scores(side) for side in sides):
        return False
    for side in sides:
        while side is not None and side.op == Op.RESHAPE:
            side = side.input
        if side is not None and side.op == Op.PARAM and side.name != "self":
            return True
    return False


#: reductions that take the scores' last dim away (``scores.max(dim=-1)``: the best class of each query)
REDUCTIONS = (Op.AMAX, Op.MAX, Op.SUM, Op.MEAN)


def across_dims(selection: Value, depth: int = 4) -> bool:
    """A top-k that chooses along another dim than the scores' alternatives: of the scores flattened or
    viewed across dims (``prob.view(B, -1)``, ``scores.flatten(1)``; ``view(-1, E)``, the experts kept
    last, is not such), or of a reduction over their last dim (``scores.max(-1)``), a few steps up from
    the softmax/sigmoid: detection post-processing, no choice among the scores of one row."""
    frontier = [selection]
    for _ in range(depth):
        for value in frontier:
            if value.op == Op.FLATTEN or value.op in REDUCTIONS and number(value["dim"]) == -1:
                return True
            rest = value["*rest"] if value.op == Op.RESHAPE else None
            if rest is not None and not (len(rest.items) == 2 and number(rest.items[0]) == -1):
                return True
        frontier = [v for value in frontier for v in (value.input,) if v is not None
                    and v.op not in (Op.SOFTMAX, Op.SIGMOID)]
    return False


def chosen_by(selection: Value, argument=None) -> str:
    """Why the values the top-k chooses from are not what a gating kernel chooses from, naming them
    (their own code, else the top-k's ``argument`` node) and the scores they come from."""
    shown = _shown(selection) or (_quoted(argument) if argument is not None else "its input")
    if selection.op == Op.PHI:
        shown = f"{shown} (set on the branches of an `if`)"
    scores = _scores_below(selection)
    if scores is None:
        return f"the experts are chosen by {shown}, whose values no softmax or sigmoid computes"
    if scores.op == Op.ACT:  # an activation module known at run time (``ACT2FN[config.scoring_func]``)
        what = f"{_shown(scores) or 'an activation'}, an activation known only at run time"
    else:
        what = f"{scores.op} scores" if scores is not selection else "them"
    return (f"the experts are chosen by {shown}, computed from {what} (the gating kernels choose from softmax or "
            "sigmoid scores themselves, plus a bias)")


def _shown(value: Value) -> Optional[str]:
    """The source of ``value`` quoted (its first 60 characters), or None."""
    return _quoted(value.node) if value.node is not None else None


def _quoted(node) -> str:
    text = " ".join(code(node).split())
    return f"`{text if len(text) <= 60 else text[:57] + '...'}`"


def _scores_below(value: Optional[Value], depth: int = 4) -> Optional[Value]:
    """The first softmax, sigmoid or run-time activation ``mentions_scores`` finds below ``value``."""
    frontier = [value]
    for level in range(depth + 1):
        for current in frontier:
            if current is not None and (current.op in (Op.SOFTMAX, Op.SIGMOID) or current.op == Op.ACT and level):
                return current
        frontier = [v for current in frontier if current is not None for v in (*current.kw.values(), *current.items)]
    return None


def mentions_scores(value: Optional[Value], depth: int = 4) -> bool:
    """A softmax or sigmoid a few steps below ``value`` (scores transformed before the choice)."""
    if value is None or depth < 0:
        return False
    if value.op in (Op.SOFTMAX, Op.SIGMOID) or (value.op == Op.ACT and depth < 4):
        return True
    return any(mentions_scores(v, depth - 1) for v in (*value.kw.values(), *value.items))


def _mentions(value: Optional[Value], target: Value, depth: int = 8) -> bool:
    if value is None or depth < 0:
        return False
    if value is target:
        return True
    return any(_mentions(v, target, depth - 1) for v in (*value.kw.values(), *value.items))
