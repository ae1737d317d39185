"""The attention family's residual detector: a softmax over q·kᵀ scores that feeds a product with V
(or a softmax module chosen in ``__init__``), in any form the matcher may not read."""

from __future__ import annotations

from typing import List

import libcst as cst

from ._match import has_transposed_product, is_scores
from ._unmatched import feeding_products
from ...tree import walk
from .._residual import Family, peel, values
from ...view import Value, View
from ...view.ops import Op
from ...view.values import reaches


def _attention(view: View) -> List[Value]:
    found = []
    for value in values(view, Op.SOFTMAX):
        scores = peel(value.input, (Op.CAST, Op.SAME, Op.RESHAPE))
        if scores is not None and (scores.op == Op.EINSUM or (is_scores(scores) and has_transposed_product(scores))):
            if _feeds_product(view, value):
                found.append(value)
    return found + _attribute_softmax(view)


def _attribute_softmax(view: View) -> List[Value]:
    """Calls ``self.<attr>(scores)`` where the class's ``__init__`` assigns ``self.<attr>`` (in any
    branch) an expression naming a softmax, ``functools.partial(F.softmax, dim=-1)`` say: the
    normalisation is chosen at construction (x-transformers' ``Attend``)."""
    cls = view.scope.cls
    if cls is None:
        return []
    found = []
    for value in values(view, Op.CALL):
        callee = value["callee"]
        if callee is None or callee.op != Op.ATTR or callee.input is None or callee.input.op != Op.PARAM \
                or callee.input.name != "self" or not _assigns_softmax(cls, callee.name):
            continue
        scores = value["arg0"]
        if scores is not None and (_reaches(scores, "einsum") or has_transposed_product(scores, 16)) \
                and _feeds_product(view, value):
            found.append(value)
    return found


def _reaches(value: Value, op: Op, depth: int = 16) -> bool:
    """Whether ``op`` computes part of ``value`` (through masks, scales and branches: ``phi``)."""
    return reaches(value, lambda v: v.op == op, depth)


def _assigns_softmax(cls: cst.ClassDef, attribute: str) -> bool:
    """``__init__`` assigns ``self.<attribute>`` a value naming a softmax, or the attribute is named as
    one (``self.scale_mask_softmax = softmax_module``: a scale-and-mask softmax module given in)."""
    if "softmax" in attribute.lower():
        return any(isinstance(n, cst.FunctionDef) and n.name.value == "__init__" for n in getattr(cls.body, "body", ()))
    for init in (s for s in getattr(cls.body, "body", ()) if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"):
        for node in walk(init):
            if isinstance(node, cst.Assign) and any(
                    isinstance(t.target, cst.Attribute) and isinstance(t.target.value, cst.Name)
                    and t.target.value.value == "self" and t.target.attr.value == attribute for t in node.targets):
                if any(isinstance(n, cst.Name) and "softmax" in n.value.lower() for n in walk(node.value)):
                    return True
    return False


def _feeds_product(view: View, value: Value) -> bool:
    """The softmax (or the call of a softmax module) feeds a product with V, as the matcher reads it."""
    return id(value) in feeding_products(view)


FAMILY = Family(
    "attention", __package__,
    "pattern.attention.unrecognised", frozenset({"softmax", "Softmax", "einsum"}), _attention,
    lambda v: "a softmax set in __init__ over q·kᵀ scores" if v.op == Op.CALL else "softmax over q·kᵀ scores",
    also=frozenset({"NPU106", "NPU107"}),  # flash_attn and xformers, reported with their plan (unsupported_api)
    word_parts=frozenset({"softmax"}),
)
