"""What the rules see of one file (``FileContext``), and the one marker of code already migrated.

Rules read the module, qualified names and the op table through the context and add ``Site``s to
it; they never change the tree or each other's state. Code this tool emitted on an earlier run is
recognised by one marker: a guard, an ``if``/conditional expression whose test calls the vendored
helper (``npu_glue.<check>(...)``, possibly ``and`` further conditions). Its fused branch and the
original code kept as its fallback (its ``else``, or for a fast path ``if <guard>: return ...``
the statements after it in its block) are both "already migrated".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set

import libcst as cst
from libcst.helpers import get_full_name_for_node

from .edits import Site
from .names import NameResolver
from .tree import TreeIndex
from .view import Value, View
from .view.ops import Op
from .view.scope import Scope, closure, module_functions
from ..opmap import OpTable
from .helpers import HELPER, is_helper_file  # noqa: F401 (the rules read them here)



def is_guard_test(test: cst.BaseExpression) -> bool:
    """``npu_glue.<check>(...)``, alone or as the first operand of ``and``: the marker."""
    while isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        test = test.left
    return isinstance(test, cst.Call) and (get_full_name_for_node(test.func) or "").startswith(HELPER + ".")


@dataclass
class FileContext:
    path: str
    module: cst.Module
    table: OpTable
    names: NameResolver
    sites: List[Site] = field(default_factory=list)
    _tree: Optional[TreeIndex] = field(default=None, repr=False)
    _guarded: Optional[Set[int]] = field(default=None, repr=False)
    _views: Dict[int, object] = field(default_factory=dict, repr=False)
    _functions: Optional[dict] = field(default=None, repr=False)

    @property
    def tree(self) -> TreeIndex:
        """The module's subtrees, names and ancestors, indexed on first use."""
        if self._tree is None:
            self._tree = TreeIndex(self.module)
        return self._tree

    @property
    def is_helper(self) -> bool:
        return is_helper_file(self.path)

    def add(self, site: Site) -> None:
        self.sites.append(site)

    def migrated(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` is a guard this tool emitted, or inside one (either branch)."""
        if self._guarded is None:
            self._guarded = set()
            if HELPER in self.tree.names(self.module):  # cheap: the module names the helper at all
                parents = self.tree.parents()
                for candidate in self.tree.of_type(self.module, cst.If, cst.IfExp):
                    if is_guard_test(candidate.test):
                        self._guarded.add(id(candidate))
                        self._guarded.update(id(s) for s in _fallthrough_fallback(candidate, parents))
        if not self._guarded:
            return False
        parents = self.tree.parents()
        while node is not None:
            if id(node) in self._guarded:
                return True
            node = parents.get(id(node))
        return False

    def view(self, func: cst.FunctionDef):
        """The dataflow view of ``func`` (``migrate.view``), built once per file and shared by the
        rules that match on it."""
        found = self._views.get(id(func))
        if found is None:
            if self._functions is None:
                self._functions = module_functions(self.module)
            parents = self.tree.parents()
            cls, free = closure(func, parents)
            scope = Scope.of(self.module, self.names.qualified_name, cls, self._functions, parents)
            enclosing = {name: Value(Op.PARAM, name=name) for name in free}
            found = self._views[id(func)] = View(func, scope, enclosing=enclosing)
        return found

    def indentation(self, block: cst.CSTNode) -> tuple:
        """(the absolute indentation of ``block``'s statements, its own indentation step)."""
        parents = self.tree.parents()
        default = self.module.default_indent
        unit = block.indent if isinstance(block, cst.IndentedBlock) and block.indent is not None else default
        total, node = "", block
        while node is not None:
            if isinstance(node, cst.IndentedBlock):
                total = (node.indent if node.indent is not None else default) + total
            node = parents.get(id(node))
        return total, unit


def _fallthrough_fallback(guard: cst.CSTNode, parents) -> List[cst.CSTNode]:
    """The statements after a fast path ``if <guard>: ... return ...`` (no else) in its block: the
    original code that runs when the guard fails."""
    if not isinstance(guard, cst.If) or guard.orelse is not None or not isinstance(guard.body, cst.IndentedBlock):
        return []
    last = guard.body.body[-1] if guard.body.body else None
    if not (isinstance(last, cst.SimpleStatementLine) and any(isinstance(s, cst.Return) for s in last.body)):
        return []
    block = parents.get(id(guard))
    body = list(getattr(block, "body", ()))
    return body[body.index(guard) + 1:] if guard in body else []
