"""The rule interface: a rule detects, the engine applies.

A rule is a libcst ``BatchableCSTVisitor`` (all rules of a file run in one traversal). It calls
``report`` for a site it cannot migrate and ``rewrite`` for a site it can; ``rewrite`` only records
a ``Fix`` for the engine, which applies every fix of the file in one pass afterwards. Rules see the
file through ``FileContext``: the module, qualified-name resolution and the op table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar, Dict, List, Optional, Sequence, Tuple, Union

import libcst as cst

from npu_migrate.migrate.findings import Finding
from npu_migrate.migrate.names import NameResolver
from npu_migrate.migrate.tree import TreeIndex
from npu_migrate.opmap import Fallback, OpRecord, OpTable

Replacement = Union[cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel, Callable[[cst.CSTNode], cst.CSTNode]]


@dataclass(frozen=True)
class ImportSpec:
    """An import a fix needs: ``import module`` or ``from module import obj [as asname]``."""

    module: str
    obj: Optional[str] = None
    asname: Optional[str] = None


@dataclass
class Fix:
    node: cst.CSTNode  # the original node to replace
    replacement: Replacement  # a node, a sentinel, or a function of the updated node
    imports: Tuple[ImportSpec, ...] = ()
    helpers: Tuple[str, ...] = ()  # helper modules (migrate/helpers/<name>.py) to vendor

    def apply(self, updated: cst.CSTNode):
        return self.replacement(updated) if callable(self.replacement) else self.replacement


@dataclass
class FileContext:
    path: str
    module: cst.Module
    table: OpTable
    names: NameResolver
    findings: List[Tuple[cst.CSTNode, Finding]] = field(default_factory=list)
    fixes: Dict[int, List[Fix]] = field(default_factory=dict)
    enabled: Callable[[str], bool] = lambda code: True  # --select/--ignore applied per code
    _tree: Optional[TreeIndex] = field(default=None, repr=False)

    @property
    def tree(self) -> TreeIndex:
        """The module's subtrees, names and ancestors, indexed on first use."""
        if self._tree is None:
            self._tree = TreeIndex(self.module)
        return self._tree


_VISITOR_NAMES: Dict[type, Tuple[str, ...]] = {}  # rule class -> names of its visit_/leave_ methods


class Rule(cst.BatchableCSTVisitor):
    code: ClassVar[str]  # the rule's primary diagnostic code
    codes: ClassVar[Tuple[str, ...]] = ()  # every code the rule may emit (defaults to (code,))
    name: ClassVar[str]  # short slug, e.g. "cuda-api"
    summary: ClassVar[str]  # one line for ``migrate explain`` listings
    triggers: ClassVar[Tuple[bytes, ...]]  # the file is given to the rule only if one of these occurs

    def __init__(self, ctx: FileContext) -> None:
        super().__init__()
        self.ctx = ctx

    def get_visitors(self) -> Dict[str, Callable]:
        """libcst's visitor methods of this rule; libcst finds them with ``inspect.getmembers`` for
        every file, here that search runs once per rule class."""
        names = _VISITOR_NAMES.get(type(self))
        if names is None:
            names = _VISITOR_NAMES[type(self)] = tuple(super().get_visitors())
        return {name: getattr(self, name) for name in names}

    @classmethod
    def all_codes(cls) -> Tuple[str, ...]:
        return cls.codes or (cls.code,)

    # -- helpers for rule authors -----------------------------------------------------------------
    def qualified_name(self, node: cst.CSTNode) -> Optional[str]:
        return self.ctx.names.qualified_name(node)

    def lookup(self, node: cst.CSTNode) -> Tuple[Optional[str], Optional[OpRecord]]:
        """The qualified name of ``node`` and its op-table record, if any."""
        qualified = self.qualified_name(node)
        return qualified, (self.ctx.table.get(qualified) if qualified else None)

    def report(self, node: cst.CSTNode, message: str, *, fallback: Fallback, api: Optional[str] = None,
               code: Optional[str] = None) -> None:
        code = code or self.code
        if self.ctx.enabled(code):
            self.ctx.findings.append((node, Finding(code, message, "reported", api=api, fallback=fallback)))

    def rewrite(self, node: cst.CSTNode, replacement: Replacement, message: str, *, target: str,
                api: Optional[str] = None, code: Optional[str] = None, imports: Sequence[ImportSpec] = (),
                helpers: Sequence[str] = ()) -> None:
        code = code or self.code
        if self.ctx.enabled(code):
            self.ctx.findings.append((node, Finding(code, message, "rewritten", api=api, target=target)))
            self.ctx.fixes.setdefault(id(node), []).append(Fix(node, replacement, tuple(imports), tuple(helpers)))

    def also_fix(self, node: cst.CSTNode, replacement: Replacement, *, code: Optional[str] = None) -> None:
        """A further edit that belongs to a site already reported with ``rewrite`` (e.g. removing the
        statement that a fused call made redundant); it has no finding of its own."""
        if self.ctx.enabled(code or self.code):
            self.ctx.fixes.setdefault(id(node), []).append(Fix(node, replacement))

    def report_record(self, node: cst.CSTNode, record: OpRecord, api: str, message: Optional[str] = None) -> None:
        """Report a site whose op-table record says it cannot be migrated as is."""
        self.report(node, message or record.summary or f"{api} has no NPU equivalent", fallback=record.fallback,
                    api=api, code=record.code)
