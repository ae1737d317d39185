"""The visitor part shared by the attention rules NPU302 and NPU303: the attention of each function
that mentions a softmax, read from its dataflow view once per file; each result (an ``Attention``
to fuse or a ``Refusal`` site) goes to the rule's ``found``."""

from __future__ import annotations

from typing import List

import libcst as cst

from ._match import match
from ._unmatched import feeding_products, unmatched_scores
from ...view.ops import Op
from ...view.scope import class_attributes

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
        multiplied = feeding_products(view)
        for softmax in softmaxes:
            blocked = unmatched_scores(softmax) if id(softmax) not in consumed and id(softmax) in multiplied else None
            if blocked is not None:
                found.append(blocked)
        view._attention = found
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
        # cheap filter: functions that mention a softmax (under any imported alias), or call a softmax
        # module of their class (``self.attend = nn.Softmax(dim=-1)`` in ``__init__``, or in an nn.Sequential)
        aliases = SOFTMAX_NAMES | {local for local, qualified in self.ctx.names.imports.items() if qualified & SOFTMAX}
        names = self.ctx.tree.names(node.body)
        if not names & aliases and not names & self._softmax_modules(node, aliases):
            return
        view = self.ctx.view(node)
        for result in attention_in(view):
            where = result.out.node if hasattr(result, "out") else result.node
            if where is not None and self.ctx.migrated(where):
                continue  # migrated before: the fallback of its guard keeps the original code
            self.found(result, view)

    def _softmax_modules(self, func: cst.FunctionDef, aliases) -> frozenset:
        """The attributes that the ``__init__`` of ``func``'s class sets to an expression naming a softmax."""
        cls = self.ctx.tree.parents().get(id(self.ctx.tree.parents().get(id(func))))
        if not isinstance(cls, cst.ClassDef):
            return frozenset()
        memo = self.__dict__.setdefault("_softmax_attributes", {})
        if id(cls) not in memo:
            memo[id(cls)] = frozenset(name for name, value in class_attributes(cls).items()
                                      if self.ctx.tree.names(value) & aliases)
        return memo[id(cls)]

    def found(self, result, view) -> None:
        raise NotImplementedError
