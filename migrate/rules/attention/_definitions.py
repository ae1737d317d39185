"""What the enclosing class and module define, as far as attention needs it: a causal buffer
proven lower-triangular and how it is sliced, dropout modules, and Hugging Face's ``repeat_kv``."""

from __future__ import annotations

from typing import List, Optional, Tuple

import libcst as cst
import libcst.matchers as m

from ...view.syntax import Qualify, code, is_name, method

DROPOUT_MODULE = {"torch.nn.Dropout", "torch.nn.modules.dropout.Dropout"}


def _class_assignments(cls: Optional[cst.ClassDef], attr: str) -> List[cst.BaseExpression]:
    """Every value assigned to ``self.<attr>`` (or registered as buffer ``attr``) in the class."""
    if cls is None:
        return []
    found = []
    for node in m.findall(cls, m.Assign(targets=[m.AssignTarget(target=m.Attribute(value=m.Name("self"), attr=m.Name(attr)))])):
        found.append(node.value)
    for call in m.findall(cls, m.Call(func=m.Attribute(attr=m.Name("register_buffer")))):
        if len(call.args) >= 2 and isinstance(call.args[0].value, cst.SimpleString) and call.args[0].value.evaluated_value == attr:
            found.append(call.args[1].value)
    return found


def self_attr(node: cst.CSTNode) -> Optional[str]:
    if isinstance(node, cst.Attribute) and is_name(node.value, "self"):
        return node.attr.value
    return None


def is_tril_buffer(cls: Optional[cst.ClassDef], attr: str, qualify: Qualify) -> bool:
    """Every assignment of ``self.<attr>`` is ``torch.tril(torch.ones(...))`` (views/casts allowed)."""
    values = _class_assignments(cls, attr)

    def tril_of_ones(value) -> bool:
        for call in m.findall(value, m.Call()):
            if qualify(call.func) == "torch.tril" and call.args and isinstance(call.args[0].value, cst.Call) \
                    and qualify(call.args[0].value.func) == "torch.ones":
                return True
            if method(call, {"tril"}) and isinstance(call.func.value, cst.Call) and qualify(call.func.value.func) == "torch.ones":
                return True
        return False

    return bool(values) and all(tril_of_ones(v) for v in values)


def is_minus_inf_mask(cls: Optional[cst.ClassDef], attr: str, qualify: Qualify) -> bool:
    """Every assignment of ``self.<attr>`` builds an additive mask: minus infinity (``float("-inf")``,
    ``-math.inf``, ``torch.finfo(...).min``) placed by ``triu``/``tril``/``masked_fill``/``where``/
    ``full``. What it holds now is still checked at run time; this only says it is meant as a mask,
    not a position bias."""
    values = _class_assignments(cls, attr)

    def minus_inf(value) -> bool:
        text = code(value).replace(" ", "")
        return any(spelled in text for spelled in ('float("-inf")', "float('-inf')", "-float(", "-math.inf",
                                                   "-torch.inf", ").min"))

    def placed(value) -> bool:
        return any(method(call, {"triu", "tril", "masked_fill", "masked_fill_", "fill_"}) or
                   qualify(call.func) in ("torch.triu", "torch.tril", "torch.where", "torch.full")
                   for call in m.findall(value, m.Call()))

    return bool(values) and all(minus_inf(v) and placed(v) for v in values)


def causal_alignment(node: cst.CSTNode) -> Optional[Tuple[str, int]]:
    """(buffer attr, sparse mode) for ``self.buf[:, :, :A, :B]`` (top-left: 2) or
    ``self.buf[:, :, K - Q:K, :K]`` (bottom-right: 3)."""
    if not isinstance(node, cst.Subscript) or self_attr(node.value) is None or len(node.slice) != 4:
        return None
    parts = [e.slice for e in node.slice]
    if not all(isinstance(p, cst.Slice) and p.step is None for p in parts):
        return None
    if any(p.lower is not None or p.upper is not None for p in parts[:2]):
        return None
    rows, cols = parts[2], parts[3]
    if cols.lower is not None or cols.upper is None or rows.upper is None:
        return None
    if rows.lower is None:
        return self_attr(node.value), 2
    lower = rows.lower
    if isinstance(lower, cst.BinaryOperation) and isinstance(lower.operator, cst.Subtract) \
            and code(lower.left) == code(rows.upper) == code(cols.upper):
        return self_attr(node.value), 3
    return None
