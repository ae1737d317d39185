"""The visitor part shared by the attention rules NPU302 and NPU303: each function that mentions a
softmax is analysed, and each result (a fusion or a blocked site) goes to the rule's ``found``."""

from __future__ import annotations

from typing import List

import libcst as cst

from npu_migrate.migrate.rules._attention_exprs import SOFTMAX
from npu_migrate.migrate.rules._attention_patterns import FunctionAnalysis


class FunctionRule:
    """Mixin for rules that analyse each function: tracks the enclosing class and indentation."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._classes: List[cst.ClassDef] = []
        self._indents: List[str] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.append(node)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.pop()

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._indents.append(node.indent if node.indent is not None else self.ctx.module.default_indent)

    def leave_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._indents.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self.ctx.is_helper:
            return
        # cheap filter: functions that mention a softmax (under any imported alias)
        aliases = {"softmax"} | {local for local, qualified in self.ctx.names.imports.items() if qualified & SOFTMAX}
        if not self.ctx.tree.names(node.body) & aliases:
            return
        cls = self._classes[-1] if self._classes and node in self._classes[-1].body.body else None
        analysis = FunctionAnalysis(node, cls, self.ctx.module, self.qualified_name, "".join(self._indents))
        for result in analysis.results:
            self.found(result, node)

    def found(self, result, func: cst.FunctionDef) -> None:
        raise NotImplementedError
