"""The visitor part shared by the attention rules NPU302 and NPU303: the attention of each function
that mentions a softmax, read from its dataflow view once per file; each result (an ``Attention``
to fuse or a ``Refusal`` site) goes to the rule's ``found``."""

from __future__ import annotations

from typing import List

import libcst as cst

from ._match import match, unmatched_scores
from ...view.ops import Op

SOFTMAX = {"torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax", "torch.nn.Softmax"}
SOFTMAX_NAMES = frozenset({"softmax", "Softmax"})


def attention_in(view) -> List[object]:
    """Every attention result of the view: an ``Attention`` or ``Refusal`` per product with V, then
    a ``Refusal`` for each softmax over q·kᵀ scores that no such product consumed (memoised on the
    view)."""
    found = getattr(view, "_attention", None)
    if found is None:
        found, seen, softmaxes, consumed = [], set(), [], set()
        for value in list(view.values.values()):
            if id(value) in seen or not view.home(value):
                continue
            seen.add(id(value))
            if value.op == Op.MATMUL:
                result, softmax = match(value)
                if result is not None and not hasattr(result, "out"):
                    result.root = value.node  # where to point when the blocking code is in an inlined helper
                if result is not None:
                    found.append(result)
                    consumed.add(id(softmax))
            elif value.op == Op.SOFTMAX:
                softmaxes.append(value)
        multiplied = _multiplied(view)
        for softmax in softmaxes:
            blocked = unmatched_scores(softmax) if id(softmax) not in consumed and id(softmax) in multiplied else None
            if blocked is not None:
                found.append(blocked)
        view._attention = found
    return found


def _multiplied(view) -> set:
    """Ids of the softmax values whose output (cast, dropped out, sliced) feeds a product."""
    found = set()
    for value in view.values.values():
        if value.op not in (Op.MATMUL, Op.EINSUM, Op.MUL, Op.CALL):
            continue
        operands = list(value.kw.values()) + [i for v in value.kw.values() for i in v.items]
        for operand in operands:
            while operand is not None and operand.op in (Op.CAST, Op.SAME, Op.DROPOUT, Op.GETITEM, Op.PHI):
                operand = operand.input if operand.op != Op.PHI else operand["else"]
            if operand is not None and operand.op == Op.SOFTMAX:
                found.add(id(operand))
    return found


class FunctionRule:
    """Mixin for rules that analyse the attention of each function."""

    @classmethod
    def may_find(cls, words) -> bool:
        """The cheap filter for some function (an import names what it imports)."""
        aliases = SOFTMAX_NAMES | words.may_denote(SOFTMAX)
        return any(f.names & aliases for f in words.functions)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self.ctx.is_helper:
            return
        # cheap filter: functions that mention a softmax (under any imported alias)
        aliases = SOFTMAX_NAMES | {local for local, qualified in self.ctx.names.imports.items() if qualified & SOFTMAX}
        if not self.ctx.tree.names(node.body) & aliases:
            return
        view = self.ctx.view(node)
        for result in attention_in(view):
            where = result.out.node if hasattr(result, "out") else result.node
            if where is not None and self.ctx.migrated(where):
                continue  # migrated before: the fallback of its guard keeps the original code
            self.found(result, view)

    def found(self, result, view) -> None:
        raise NotImplementedError
