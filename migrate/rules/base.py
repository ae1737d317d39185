"""The rule interface: a rule detects, the engine applies.

A rule is a libcst ``BatchableCSTVisitor`` (all rules of a file run in one traversal). For a site
it cannot migrate it calls ``report``; for a site it can, ``rewrite`` with the edits that make the
rewrite (``migrate.edits``: data, never closures). The engine decides what is applied: it drops
sites whose codes are not selected, checks that edits do not overlap, applies them all in one pass
and checks the output. Rules see the file through ``FileContext`` (``migrate.context``).

A rule declares each code it emits once, in ``declarations`` (``diagnostics.DiagnosticCode``: code,
name, summary, whether it rewrites, its example fixture); the first is the rule's primary code.
``code``, ``codes`` and ``summary`` are derived from them for the rule's body.
"""

from __future__ import annotations

from typing import Callable, ClassVar, Dict, Optional, Sequence, Tuple, Union

import libcst as cst

from ..context import FileContext
from ..diagnostics import DiagnosticCode
from ..edits import Code, Edit, ImportSpec, Replace, Site
from ..findings import Finding
from ...opmap import Fallback, OpRecord

_VISITOR_NAMES: Dict[type, Tuple[str, ...]] = {}  # rule class -> names of its visit_/leave_ methods


_DERIVED = ("code", "codes", "name", "summary", "summaries")  # declared by ``declarations`` only


class Rule(cst.BatchableCSTVisitor):
    declarations: ClassVar[Tuple[DiagnosticCode, ...]]  # every code the rule may emit, primary first
    code: ClassVar[str]  # derived: the primary code
    codes: ClassVar[Tuple[str, ...]]  # derived: every code, in declaration order
    summary: ClassVar[str]  # derived: the primary code's summary
    triggers: ClassVar[Tuple[bytes, ...]]  # the file is given to the rule only if one of these occurs

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        stray = [attr for attr in _DERIVED if attr in vars(cls)]
        if stray:
            raise TypeError(f"{cls.__qualname__} sets {', '.join(stray)}: declare each code once in "
                            "`declarations = (DiagnosticCode(code, name, summary, ...), ...)`")
        if "declarations" in vars(cls):
            if not cls.declarations or not all(isinstance(d, DiagnosticCode) for d in cls.declarations):
                raise TypeError(f"{cls.__qualname__}.declarations must be a non-empty tuple of DiagnosticCode")
            cls.code = cls.declarations[0].code
            cls.codes = tuple(d.code for d in cls.declarations)
            cls.summary = cls.declarations[0].summary

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

    def may_find(cls, words) -> bool:
        """Triage (``migrate.triage``): False only when no file whose code names ``words`` (a
        ``triage.Words``) can hold a site of this rule. A rule answers from the vocabulary of its own
        per-function test; this default keeps every file its ``triggers`` let through."""
        return True

    may_find.keeps_every_file = True  # a rule without a test of its own: ``triage`` keeps its files unread
    may_find = classmethod(may_find)

    @classmethod
    def all_codes(cls) -> Tuple[str, ...]:
        return cls.codes

    # -- helpers for rule authors -----------------------------------------------------------------
    def qualified_name(self, node: cst.CSTNode) -> Optional[str]:
        return self.ctx.names.qualified_name(node)

    def lookup(self, node: cst.CSTNode) -> Tuple[Optional[str], Optional[OpRecord]]:
        """The qualified name of ``node`` and its op-table record, if any."""
        qualified = self.qualified_name(node)
        return qualified, (self.ctx.table.get(qualified) if qualified else None)

    def report(self, node: cst.CSTNode, message: str, *, fallback: Fallback, api: Optional[str] = None,
               code: Optional[str] = None) -> None:
        self.ctx.add(Site(node, Finding(code or self.code, message, "reported", api=api, fallback=fallback)))

    def rewrite(self, node: cst.CSTNode, message: str, *, target: str, edits: Sequence[Edit],
                api: Optional[str] = None, code: Optional[str] = None, imports: Sequence[ImportSpec] = (),
                helpers: Sequence[str] = ()) -> None:
        """A site rewritten by ``edits`` (all applied, or none); the finding points at ``node``."""
        finding = Finding(code or self.code, message, "rewritten", api=api, target=target)
        self.ctx.add(Site(node, finding, tuple(edits), tuple(imports), tuple(helpers)))

    def replace(self, node: cst.CSTNode, new: Union[Code, cst.CSTNode], message: str, *, target: str,
                api: Optional[str] = None, code: Optional[str] = None, imports: Sequence[ImportSpec] = (),
                helpers: Sequence[str] = ()) -> None:
        """A site rewritten by replacing ``node`` with ``new``."""
        self.rewrite(node, message, target=target, edits=[Replace(node, new)], api=api, code=code, imports=imports,
                     helpers=helpers)

    def report_record(self, node: cst.CSTNode, record: OpRecord, api: str, message: Optional[str] = None) -> None:
        """Report a site whose op-table record says it cannot be migrated as is."""
        self.report(node, message or record.summary or f"{api} has no NPU equivalent", fallback=record.fallback,
                    api=api, code=record.code)
