"""Members of tensors and modules (``x.cuda()``, ``x.is_cuda``, ``x.double()``) on receivers whose
type is unknown statically.

A receiver that resolves to an import is a module or class: only ``torch.Tensor`` and
``torch.nn.Module`` count. Inside a user class that defines the member itself (a method, a class
attribute or ``self.<member> = ...``), ``self.<member>`` is the user's and is left alone.
"""

from __future__ import annotations

from typing import ClassVar, List, Set

import libcst as cst
import libcst.matchers as m

from ._table import dotted
from .base import Rule

TORCH_OWNERS = frozenset({"torch.Tensor", "torch.nn.Module", "torch.nn.modules.module.Module"})


def own_members(node: cst.ClassDef, member: str) -> bool:
    """Whether the class defines ``member`` itself."""
    for stmt in node.body.body:
        if m.matches(stmt, m.FunctionDef(name=m.Name(member))):
            return True
        if m.matches(stmt, m.SimpleStatementLine(body=[m.OneOf(m.Assign(targets=[m.AssignTarget(m.Name(member))]),
                                                             m.AnnAssign(target=m.Name(member)))])):
            return True
    self_member = m.Attribute(value=m.Name("self"), attr=m.Name(member))
    return bool(m.findall(node, m.AssignTarget(self_member) | m.AnnAssign(target=self_member)))


class MemberRule(Rule):
    member: ClassVar[str]  # the attribute name, e.g. "cuda"

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._classes: List[bool] = []  # per enclosing class: defines the member itself
        self._targets: Set[int] = set()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        # cheap first: defining the member names it somewhere in the class
        self._classes.append(self.member in self.ctx.tree.names(node) and own_members(node, self.member))

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.pop()

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._targets.add(id(node.target))

    def is_torch_member(self, node: cst.Attribute) -> bool:
        """``node`` is ``<receiver>.<member>`` and the receiver may be a tensor or a module."""
        if node.attr.value != self.member or id(node) in self._targets:
            return False
        receiver = node.value
        qualified = self.qualified_name(receiver) if dotted(receiver) else None
        if qualified is not None:
            return qualified in TORCH_OWNERS
        if m.matches(receiver, m.Name("self") | m.Name("cls")) and self._classes and self._classes[-1]:
            return False
        return True

    def called_member(self, node: cst.Call) -> cst.Attribute | None:
        """The ``x.<member>`` of a call ``x.<member>(...)`` that may be a torch member."""
        func = node.func
        return func if isinstance(func, cst.Attribute) and self.is_torch_member(func) else None
