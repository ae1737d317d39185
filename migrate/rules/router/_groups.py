"""Group-limited expert choice (DeepSeek-V2/V3 style) on the dataflow view: the selection scores
are split into ``group_count`` groups of experts, each group is scored (its max, or the sum of its
top two), the ``k_group`` best groups are kept and every expert of the others is masked before the
top-k over experts. Read from the Hugging Face spelling::

    group_scores = scores.view(-1, n_group, n_experts // n_group).topk(2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores)
    group_mask.scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(-1, n_group, n_experts // n_group).reshape(-1, n_experts)
    scores = scores.masked_fill(~score_mask.bool(), float("-inf"))      # or 0.0

(``.max(dim=-1).values`` / ``.amax(-1)`` for the group max, ``topk(n)`` with ``n`` a run-time value).
``masked(value)`` returns the ``Groups`` found and the scores before the mask, or None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from ...view.values import number
from ...view import Value
from ...view.ops import Op


@dataclass
class Groups:
    count: Value  # group_count: the reshape's group axis
    size: Value  # the experts per group as written (``-1`` or ``n_experts // n_group``)
    k_group: Value  # how many groups are kept
    top: Optional[Value]  # group score = sum of its ``top`` largest (None: its max)
    fill: str  # "-inf" or "0": what the masked experts' selection scores become


def masked(value: Value) -> Optional[Tuple[Groups, Value]]:
    """(groups, the scores before the mask) for a group mask applied with ``masked_fill``."""
    if value.op != Op.MASKED_FILL or value["mask"] is None or value["mask"].op != Op.INVERT:
        return None
    fill = _fill(value["value"])
    scores = value.input
    keep = _expanded(_bool(value["mask"].input))
    found = _kept_groups(keep) if keep is not None else None
    if fill is None or found is None:
        return None
    group_scores, k_group = found
    read = _group_score(group_scores)
    if read is None or read[0] is not scores:
        return None
    _, count, size, top = read
    return Groups(count, size, k_group, top, fill), scores


def _fill(value: Optional[Value]) -> Optional[str]:
    if value is None:
        return None
    if value.op == Op.CONST and value.number == 0:
        return "0"
    negated = value.op == Op.NEG
    inner = value.input if negated else value
    if inner is not None and inner.op == Op.CALL and inner.name is None and inner["callee"] is not None \
            and inner["callee"].name == "float" and inner["arg0"] is not None and inner["arg0"].op == Op.STR:
        text = (inner["arg0"].name or "").strip().lower()
        if text in ("-inf", "-infinity") and not negated or text in ("inf", "infinity") and negated:
            return "-inf"
    if negated and inner is not None and inner.op == Op.NAME and inner.name in ("math.inf", "torch.inf", "numpy.inf"):
        return "-inf"
    return None


def _bool(value: Optional[Value]) -> Optional[Value]:
    """``x.bool()`` / ``x.to(torch.bool)`` → x."""
    if value is not None and value.op == Op.CALL and set(value.kw) == {"callee"} and value["callee"].op == Op.ATTR \
            and value["callee"].name == "bool":
        return value["callee"].input
    if value is not None and value.op == Op.CAST and value["dtype"] is not None and value["dtype"].name == "torch.bool":
        return value.input
    return None


def _expanded(value: Optional[Value]) -> Optional[Value]:
    """``m.unsqueeze(-1).expand(-1, G, S).reshape(-1, E)`` → m: each group's flag for its experts."""
    if value is None or value.op != Op.RESHAPE:
        return None
    expand = value.input
    if expand is None or expand.op != Op.EXPAND or expand.input is None or expand.input.op != Op.UNSQUEEZE:
        return None
    if number(expand.input["dim"]) != -1:
        return None
    return expand.input.input


def _kept_groups(value: Value) -> Optional[Tuple[Value, Value]]:
    """(group scores, k_group) for ``zeros_like(s).scatter_(1, topk(s, k_group)[1], 1)``."""
    if value.op != Op.SCATTER or number(value["src"]) != 1 or number(value["dim"]) not in (1, -1):
        return None
    zeros, index = value.input, value["index"]
    if zeros is None or zeros.op != Op.ZEROS_LIKE or index is None or index.op != Op.ITEM or index.number != 1:
        return None
    chosen = index.input
    if chosen.op != Op.TOPK or chosen.input is not zeros.input or (chosen["dim"] is not None and number(chosen["dim"]) != -1):
        return None
    return zeros.input, chosen["k"]


def _group_score(value: Value) -> Optional[Tuple[Value, Value, Value, Optional[Value]]]:
    """(scores, group_count, group size, top) for ``reshape(scores, -1, G, S)`` scored per group."""
    top = None
    if value.op == Op.AMAX and number(value["dim"]) == -1:
        grouped = value.input
    elif value.op == Op.SUM and number(value["dim"]) == -1 and value.input is not None and value.input.op == Op.ITEM \
            and value.input.number == 0 and value.input.input.op == Op.TOPK:
        best = value.input.input
        if best["dim"] is None or number(best["dim"]) != -1 or best["k"] is None:
            return None
        grouped, top = best.input, best["k"]
    else:
        return None
    shape = grouped["*rest"] if grouped is not None and grouped.op == Op.RESHAPE else None
    if shape is None or len(shape.items) != 3 or number(shape.items[0]) != -1:
        return None
    return grouped.input, shape.items[1], shape.items[2], top
