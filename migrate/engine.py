"""One file in, one ``FileResult`` out: parse once, run every applicable rule in one batched pass,
report every component no rule covered (``migrate.residual``), apply the edits of every site in
one pass (``migrate.apply``), add the imports they need, and check the output.

The engine owns the edits: it keeps only sites whose codes are selected, keeps as it is a site whose
line carries ``# npu-migrate: ignore[CODE]`` (action ``suppressed``), leaves out a site whose
edits overlap another's (the site becomes an NPU006 finding, never a silent drop), and after the
pass checks that every node an edit produced is in the output, downgrading a site that is not;
so every finding reported as ``rewritten`` is in the migrated file.

Nothing here raises for a bad file: unreadable, non-UTF-8, unparsable input and rule crashes all
become an error result naming the reason, and the original text is kept.

Outside the rewritten lines the output keeps the input's bytes: a UTF-8 byte-order mark (which
libcst does not keep) is put back, and so is a last ``\r`` of a file with CR line endings (libcst
drops it); every other line ending, ``\n``, ``\r\n``, ``\r`` or a mix, libcst keeps as it is.
"""

from __future__ import annotations

import ast
import traceback
from typing import Callable, FrozenSet, List, Mapping, Optional, Sequence, Tuple, Type

import libcst as cst

from . import diagnostics, notebooks, residual
from .apply import Apply, missing, overlaps
from .codegen import code
from .context import FileContext
from .edits import ImportSpec, Site, placed_at, site_constant
from .findings import FileResult, Finding, error_result  # noqa: F401  (error_result: also here)
from .imports import add_imports
from .line_fit import fit_lines
from .names import NameResolver
from .positions import positions
from .first_party import first_party_for
from .rules import code_enabled, select_rules
from .rules.base import Rule
from .suppressions import ignored_file, is_suppressed, suppressed_lines
from .triage import may_hold_site
from .visit import visit_batched
from ..opmap import Fallback, OpTable

BOM = "\ufeff"  # a UTF-8 byte-order mark, as decoded
NOT_APPLIED_PLAN = Fallback(
    "manual",
    "The overlapping rewrite was applied and this one was not. Review the site: running migrate again on the "
    "migrated tree may apply it, or make the change by hand and check it with migrate parity.",
)


def _crashed_rule(exc: BaseException) -> str:
    """The rule whose code raised, found from the traceback's frames."""
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        owner = frame.f_locals.get("self")
        if isinstance(owner, Rule):
            return f"{type(owner).__name__} ({owner.code})"
    return "a rule"


def _exception_line(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


class Engine:
    def __init__(self, table: OpTable, rules: Sequence[Type[Rule]], enabled: Callable[[str], bool] = lambda code: True,
                 first_party: Optional[Mapping[str, FrozenSet[str]]] = None, triage: bool = True) -> None:
        self.table = table
        self.rules = list(rules)
        self.enabled = enabled
        # the residual families a file's words are checked against (``migrate.triage``); None: no triage
        self.families = [f for f in residual.FAMILIES if f.enabled(enabled)] if triage else None
        # isort's first-party names by directory ("" for PATH): see first_party.first_party_names
        self.first_party: Mapping[str, FrozenSet[str]] = first_party or {}

    def first_party_of(self, path: str) -> FrozenSet[str]:
        """The module names isort counts as first party in the file at ``path``."""
        return first_party_for(self.first_party, path)

    def applicable(self, data: bytes) -> List[Type[Rule]]:
        """The cheap byte check: rules whose trigger strings occur in the file."""
        return [rule for rule in self.rules if any(t in data for t in rule.triggers)]

    def migrate(self, path: str, data: bytes) -> FileResult:
        """The file's result; never raises for a bad file (pathological nesting and memory included).
        A notebook's code cells are migrated as one module (``migrate.notebooks``)."""
        if path.endswith(".ipynb"):
            return notebooks.migrate(self._guarded, path, data, error_result)
        return self._guarded(path, data)

    def _guarded(self, path: str, data: bytes) -> FileResult:
        try:
            return self._migrate(path, data)
        except RecursionError as exc:
            return error_result(path, diagnostics.TOO_DEEP, f"nesting too deep to migrate ({_exception_line(exc)}); "
                                                            "not migrated")
        except MemoryError:
            return error_result(path, diagnostics.TOO_DEEP, "ran out of memory while migrating; not migrated")
        except Exception as exc:
            return error_result(path, diagnostics.RULE_CRASH, f"migration crashed: {_exception_line(exc)}")

    def _migrate(self, path: str, data: bytes) -> FileResult:
        rules = self.applicable(data)
        if not rules:
            return FileResult(path, "skipped")
        try:
            source = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return error_result(path, diagnostics.NOT_UTF8, f"not UTF-8 text (byte {exc.start}: {exc.reason})")
        bom = BOM if source.startswith(BOM) else ""
        text = source[len(bom):]
        if self.families is not None and not may_hold_site(text, rules, self.families):
            return FileResult(path, "unchanged")  # what libcst and the rules would find: no site
        try:
            module = cst.parse_module(text)
        except cst.ParserSyntaxError as exc:
            return error_result(path, diagnostics.PARSE_ERROR, f"does not parse: {exc.message}", exc.raw_line, exc.raw_column)
        except Exception as exc:  # libcst raises a few other errors on odd input
            return error_result(path, diagnostics.PARSE_ERROR, f"does not parse: {exc}")

        names = NameResolver(module)
        ctx = FileContext(path, module, self.table, names)
        try:
            visit_batched(ctx.tree, module, [rule(ctx) for rule in rules])
        except Exception as exc:
            return error_result(path, diagnostics.RULE_CRASH, f"{_crashed_rule(exc)} crashed: {_exception_line(exc)}")
        try:
            residual.check(ctx, self.enabled)
        except Exception as exc:
            return error_result(path, diagnostics.RULE_CRASH, f"the residual pass crashed: {_exception_line(exc)}")

        sites = self._place(path, module, [s for s in ctx.sites if self.enabled(s.finding.code)])
        kept_as_is = suppressed_lines(text)
        whole_file = ignored_file(text)  # `# npu-migrate: ignore-file[...]`: as if on every line
        for site in sites:
            if is_suppressed(kept_as_is, site.finding.line, site.finding.code) or \
                    is_suppressed({0: whole_file} if whole_file is not None else {}, 0, site.finding.code):
                site.finding.action, site.edits = "suppressed", ()
            elif site.edits:
                _unless_switched_off(site, self.table)
        findings = lambda: [s.finding for s in sites]  # noqa: E731  (downgrades change them)
        rewriting = [s for s in sites if s.edits]
        dropped = overlaps(rewriting, ctx.tree)
        for site in rewriting:
            if id(site) in dropped:
                _not_applied(site, dropped[id(site)])
        rewriting = [s for s in rewriting if s.edits]
        if not rewriting:
            return FileResult(path, "unchanged", findings())
        for site in rewriting:  # the guards' site constants, now that the findings have their lines
            constant = site_constant(path, site.finding.line, site.finding.code)
            site.edits = tuple(placed_at(edit, constant) for edit in site.edits)
        try:
            migrated, helpers = self._apply(ctx, rewriting, text)
        except Exception as exc:
            return error_result(path, diagnostics.RULE_CRASH, f"applying the edits failed: {_exception_line(exc)}")
        if text.endswith("\r"):
            migrated += "\r"  # libcst drops the newline of a last line that ends in a lone CR
        if migrated == text:
            return FileResult(path, "unchanged", findings())
        try:
            ast.parse(migrated, filename=path)  # CPython's own parser: the check is whether Python accepts it
        except Exception as exc:
            return error_result(path, diagnostics.OUTPUT_INVALID, f"the rewritten file does not parse ({exc}); left unchanged")
        return FileResult(path, "changed", findings(), original=source, migrated=bom + migrated, helpers=helpers)

    def _place(self, path: str, module: cst.Module, sites: List[Site]) -> List[Site]:
        """The sites with their findings' positions, in source order."""
        where = positions(module, [site.anchor for site in sites])
        for site in sites:
            site.finding.path = path
            site.finding.line, site.finding.col = where.get(id(site.anchor), (0, 0))
        return sorted(sites, key=lambda s: (s.finding.line, s.finding.col, s.finding.code))

    def _apply(self, ctx: FileContext, sites: List[Site], source: str) -> Tuple[str, List[str]]:
        """The migrated text and the helper modules it imports (each vendored beside the file, and
        imported so that it resolves in every layout: ``migrate.imports``); a site whose edits did
        not all reach the output is downgraded and the pass runs again without it."""
        while True:
            for site in sites:
                site.results.clear()
            new_module = ctx.module.visit(Apply(sites, ctx.tree))
            imports: List[ImportSpec] = []
            helpers: List[str] = []
            for site in sites:
                imports.extend(site.imports)
                for helper in site.helpers:
                    if helper not in helpers:
                        helpers.append(helper)
                        imports.append(ImportSpec(helper, beside=True))
            lost = missing(new_module, sites, ctx.tree)  # before the imports: they re-make top-level statements
            if not lost:
                if imports:
                    new_module = add_imports(new_module, imports, ctx.names, self.first_party_of(ctx.path), ctx.tree)
                return fit_lines(new_module, code(new_module), source), helpers
            for site in lost:
                _not_applied(site, "its edit did not reach the output (an internal error of npu-migrate)")
            sites = [s for s in sites if s.edits]
            if not sites:
                return code(ctx.module), []


def _unless_switched_off(site: Site, table: OpTable) -> None:
    """A fused rewrite whose op-table record (by the site's API, else its target) has a status other
    than ``fused`` is turned off by configuration: the site is reported, its code kept as is."""
    finding = site.finding
    if not finding.code.startswith("NPU3"):
        return
    record = next((r for r in (table.get(finding.api) if finding.api else None,
                               table.get(finding.target) if finding.target else None)
                   if r is not None and r.code == finding.code), None)
    if record is None or record.status == "fused":
        return
    site.edits = ()
    site.finding = Finding(finding.code, f"{finding.message}: not applied, the op table sets {record.api} to "
                                         f"status {record.status}", "reported", api=finding.api,
                           fallback=record.fallback or Fallback("manual", "Keep the original code (the op table "
                                                                "turns this fusion off)."),
                           path=finding.path, line=finding.line, col=finding.col)


def _not_applied(site: Site, why: str) -> None:
    """Turn a rewrite that will not be applied into a reported NPU006 finding at the same place."""
    old = site.finding
    site.finding = Finding(diagnostics.NOT_APPLIED, f"{old.code} rewrite not applied: {why} ({old.message})",
                           "reported", api=old.api, fallback=NOT_APPLIED_PLAN, path=old.path, line=old.line,
                           col=old.col)
    site.edits = ()


def build_engine(table: OpTable, select=None, ignore=None,
                 first_party: Optional[Mapping[str, FrozenSet[str]]] = None, triage: bool = True) -> Engine:
    """An engine with the rules that ``--select``/``--ignore`` leave enabled; ``triage=False`` hands
    every file with a rule's trigger bytes to libcst (``migrate.triage``: the results are the same)."""
    return Engine(table, select_rules(select, ignore), lambda code: code_enabled(code, select, ignore), first_party,
                  triage)
