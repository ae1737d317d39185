"""One file in, one ``FileResult`` out: parse once, run every applicable rule in one batched pass,
apply all fixes in one transform, add the imports they need, and check the output parses.

Nothing here raises for a bad file: unreadable, non-UTF-8, unparsable input and rule crashes all
become an error result naming the reason, and the original text is kept.
"""

from __future__ import annotations

import traceback
from typing import Callable, Dict, List, Sequence, Set, Type

import libcst as cst

from npu_migrate.migrate import diagnostics
from npu_migrate.migrate.findings import FileResult, Finding
from npu_migrate.migrate.imports import add_imports
from npu_migrate.migrate.names import NameResolver
from npu_migrate.migrate.positions import positions
from npu_migrate.migrate.rules.base import FileContext, Fix, ImportSpec, Rule
from npu_migrate.migrate.rules import code_enabled, select_rules
from npu_migrate.opmap import OpTable


class _ApplyFixes(cst.CSTTransformer):
    """Applies the fixes bottom-up, descending only into nodes that hold a fixed node (``holders``:
    the ids of the fixed nodes' ancestors), so that libcst keeps every other subtree as it is
    instead of rebuilding it."""

    def __init__(self, fixes: Dict[int, List[Fix]], holders: Set[int]) -> None:
        super().__init__()
        self.fixes = fixes
        self.holders = holders

    def on_visit(self, node) -> bool:
        return id(node) in self.holders

    def on_leave(self, original_node, updated_node):
        for fix in self.fixes.get(id(original_node), ()):
            if not isinstance(updated_node, cst.CSTNode):
                break  # an earlier fix removed the node
            updated_node = fix.apply(updated_node)
        return updated_node


def _crashed_rule(exc: BaseException) -> str:
    """The rule whose code raised, found from the traceback's frames."""
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        owner = frame.f_locals.get("self")
        if isinstance(owner, Rule):
            return f"{type(owner).__name__} ({owner.code})"
    return "a rule"


def _exception_line(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def error_result(path: str, code: str, message: str, line: int = 0, col: int = 0) -> FileResult:
    """A file that could not be processed: one tool finding, the original kept."""
    where = f"{path}:{line}:{col}" if line else path
    finding = Finding(code, message, "reported", path=path, line=line, col=col)
    return FileResult(path, "error", [finding], error=f"{where}: {code} {message}")


class Engine:
    def __init__(self, table: OpTable, rules: Sequence[Type[Rule]], enabled: Callable[[str], bool] = lambda code: True) -> None:
        self.table = table
        self.rules = list(rules)
        self.enabled = enabled

    def applicable(self, data: bytes) -> List[Type[Rule]]:
        """The cheap byte check: rules whose trigger strings occur in the file."""
        return [rule for rule in self.rules if any(t in data for t in rule.triggers)]

    def migrate(self, path: str, data: bytes, *, in_package: bool = False) -> FileResult:
        rules = self.applicable(data)
        if not rules:
            return FileResult(path, "skipped")
        try:
            source = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return error_result(path, diagnostics.NOT_UTF8, f"not UTF-8 text (byte {exc.start}: {exc.reason})")
        try:
            module = cst.parse_module(source)
        except cst.ParserSyntaxError as exc:
            return error_result(path, diagnostics.PARSE_ERROR, f"does not parse: {exc.message}", exc.raw_line, exc.raw_column)
        except Exception as exc:  # libcst raises a few other errors on odd input
            return error_result(path, diagnostics.PARSE_ERROR, f"does not parse: {exc}")

        ctx = FileContext(path, module, self.table, NameResolver(module), enabled=self.enabled)
        try:
            cst.visit_batched(module, [rule(ctx) for rule in rules])
        except Exception as exc:
            return error_result(path, diagnostics.RULE_CRASH, f"{_crashed_rule(exc)} crashed: {_exception_line(exc)}")

        findings = self._place(path, module, ctx)
        if not ctx.fixes:
            return FileResult(path, "unchanged", findings)
        try:
            migrated, helpers = self._apply(ctx, in_package)
        except Exception as exc:
            return error_result(path, diagnostics.RULE_CRASH, f"applying the fixes failed: {_exception_line(exc)}")
        if migrated == source:
            return FileResult(path, "unchanged", findings)
        try:
            cst.parse_module(migrated)
        except Exception as exc:
            return error_result(path, diagnostics.OUTPUT_INVALID, f"the rewritten file does not parse ({exc}); left unchanged")
        return FileResult(path, "changed", findings, original=source, migrated=migrated, helpers=helpers)

    def _place(self, path: str, module: cst.Module, ctx: FileContext) -> List[Finding]:
        where = positions(module, [node for node, _ in ctx.findings])
        placed = []
        for node, finding in ctx.findings:
            finding.path = path
            finding.line, finding.col = where.get(id(node), (0, 0))
            placed.append(finding)
        return sorted(placed, key=lambda f: (f.line, f.col, f.code))

    def _apply(self, ctx: FileContext, in_package: bool):
        fixes = ctx.fixes
        holders = ctx.tree.ancestors(fix.node for group in fixes.values() for fix in group)
        new_module = ctx.module.visit(_ApplyFixes(fixes, holders))
        imports: List[ImportSpec] = []
        helpers: List[str] = []
        for fix in (f for group in fixes.values() for f in group):
            imports.extend(fix.imports)
            for helper in fix.helpers:
                if helper not in helpers:
                    helpers.append(helper)
                    imports.append(ImportSpec(".", helper) if in_package else ImportSpec(helper))
        if imports:
            new_module = add_imports(new_module, imports, ctx.names)
        return new_module.code, helpers


def build_engine(table: OpTable, select=None, ignore=None) -> Engine:
    """An engine with the rules that ``--select``/``--ignore`` leave enabled."""
    return Engine(table, select_rules(select, ignore), lambda code: code_enabled(code, select, ignore))
