"""The parity report: per case and dtype results, their JSON form and the Rich rendering."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from rich.console import Group
from rich.table import Table
from rich.text import Text

from .criteria import Criteria
from .failures import ERROR, SETUP
from .localise import Localisation
from .metrics import Metrics
from .sites import NOT_LOADED, NOT_PROVEN, SiteRecord, ran, records

MAX_LISTED = 5  # failing tensors listed per case in the console


@dataclass
class TensorResult:
    """One compared tensor: a model output, a training loss, a gradient, an output after the training
    steps or an output after a state change (named ``<change>/<output>``)."""

    kind: str  # "output" | "loss" | "grad" | "after_step" | "after_change"
    name: str
    metrics: Optional[Metrics]
    failure: Optional[str] = None  # why it fails; None when it passes
    dtype: Optional[str] = None  # the original side's dtype (under AMP: what autocast produced)

    @property
    def passed(self) -> bool:
        return self.failure is None

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "name": self.name,
            "passed": self.passed,
            "failure": self.failure,
            "dtype": self.dtype,
            **(self.metrics.to_json() if self.metrics else {}),
        }


@dataclass
class CaseResult:
    name: str
    dtype: str
    criteria: Criteria
    tolerance_reason: Optional[str] = None
    errors: List[str] = field(default_factory=list)  # each starts with the side it happened on
    weight_problems: List[str] = field(default_factory=list)
    tensors: List[TensorResult] = field(default_factory=list)
    first_divergent: Optional[Localisation] = None
    coverage: Dict[str, Dict[str, int]] = field(default_factory=dict)
    failure_kind: Optional[str] = None  # why a side produced no results (parity.failures kinds)
    raised_in: Optional[Dict[str, Any]] = None  # where a forward raised: side, module, call, op, at, error
    not_applicable: List[str] = field(default_factory=list)  # state changes the model has nothing for
    sites: Dict[str, dict] = field(default_factory=dict)  # site -> calls, fused, fallbacks (parity.sites)
    loaded: List[str] = field(default_factory=list)  # the migrated tree's files the run imported

    @property
    def passed(self) -> bool:
        return not self.errors and not self.weight_problems and bool(self.tensors) and all(
            t.passed for t in self.tensors
        )

    @property
    def label(self) -> str:
        return f"{self.name} [{self.dtype}]"

    @property
    def verdict(self) -> str:
        """passed, diverged, raised (the migrated model raised), error, setup error or not supported."""
        if self.passed:
            return "passed"
        if self.errors:
            return {SETUP: "setup error"}.get(self.failure_kind or ERROR, self.failure_kind or ERROR)
        return "diverged"

    def of_kind(self, *kinds: str) -> List[TensorResult]:
        return [t for t in self.tensors if t.kind in kinds]

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "passed": self.passed,
            "verdict": self.verdict,
            "errors": self.errors,
            "weight_problems": self.weight_problems,
            "criteria": self.criteria.to_json(),
            "tolerance_reason": self.tolerance_reason,
            "outputs": [t.to_json() for t in self.of_kind("output")],
            "gradients": [t.to_json() for t in self.of_kind("loss", "grad")],
            "after_step": [t.to_json() for t in self.of_kind("after_step")],
            "after_change": [t.to_json() for t in self.of_kind("after_change")],
            "changes_not_applicable": self.not_applicable,
            "first_divergent_module": self.first_divergent.to_json() if self.first_divergent else None,
            "raised_in": self.raised_in,
            "op_coverage": self.coverage,
            "sites": {site: {**counts, "ran": ran(counts)} for site, counts in self.sites.items()},
        }


@dataclass
class ParityReport:
    spec: str
    original: str
    migrated: str
    backing: str
    cases: List[CaseResult] = field(default_factory=list)
    rewritten: List[str] = field(default_factory=list)  # the site constants of the migrated tree

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def site_records(self) -> List[SiteRecord]:
        return records(self.rewritten, {c.label: (c.sites, c.loaded) for c in self.cases})

    @property
    def not_proven(self) -> List[SiteRecord]:
        """Numerics-changing sites whose file a run imported but whose fused path ran in no run."""
        return [r for r in self.site_records if r.status == NOT_PROVEN]

    @property
    def setup_failed(self) -> bool:
        """Some case could not be set up (a spec reference, tree or checkpoint problem, or an
        original side that does not run)."""
        return any(c.verdict == "setup error" for c in self.cases)

    def to_json(self) -> Dict[str, Any]:
        return {
            "passed": self.passed,
            "spec": self.spec,
            "original": self.original,
            "migrated": self.migrated,
            "backing": self.backing,
            "cases": [c.to_json() for c in self.cases],
            "proven": not self.not_proven,
            "sites": [r.to_json() for r in self.site_records],
        }


# -- rendering ---------------------------------------------------------------------------------
def _worst(results: List[TensorResult]) -> str:
    """``n/m ok, cos ..., abs ...`` for a group of tensors: the worst values."""
    if not results:
        return "-"
    metrics = [r.metrics for r in results if r.metrics and not r.metrics.problem]
    text = f"{sum(r.passed for r in results)}/{len(results)} ok"
    cosines = [m.cosine for m in metrics if m.cosine is not None]
    if cosines:
        text += f", cos {min(cosines):.6f}"
    if metrics:
        text += f", abs {max(m.max_abs_err for m in metrics):.1e}"
    return text


def _ops(counts: Dict[str, int]) -> str:
    return ", ".join(f"{op} x{n}" for op, n in counts.items()) or "none"


def _raised(where: Dict[str, Any]) -> str:
    module = where.get("module") or "(outside every module)"
    text = f"{module}" + (f" (call {where['call']})" if where.get("call") is not None else "")
    if where.get("op"):
        text += f", op {where['op']}"
    return text


def _details(case: CaseResult) -> List[Text]:
    """Lines explaining a failing case."""
    lines = [Text(f"{case.name} [{case.dtype}]: {case.verdict}", style="bold red")]
    lines += [Text(f"  {error}") for error in case.errors]
    if case.raised_in:
        where = case.raised_in
        lines.append(Text(f"  raised on the {where['side']} side in {_raised(where)}"
                          + (f", at {where['at']}" if where.get("at") else "") + f": {where['error']}", style="bold"))
    lines += [Text(f"  weights: {problem}") for problem in case.weight_problems]
    failing = [t for t in case.tensors if not t.passed]
    for t in failing[:MAX_LISTED]:
        lines.append(Text(f"  {t.kind} {t.name}: {t.failure}"))
    if len(failing) > MAX_LISTED:
        lines.append(Text(f"  ... and {len(failing) - MAX_LISTED} more failing tensors (see --json)"))
    if case.first_divergent:
        d = case.first_divergent.divergent
        how = "inputs agree" if d.inputs_agree else "inputs already differ"
        lines.append(Text(f"  first divergent module: {d.module} (call {d.call}, {how}): {_metrics(d.metrics)}", style="bold"))
        for n in case.first_divergent.neighbours:
            mark = "ok  " if n.passed else "FAIL"
            lines.append(Text(f"    {mark} {n.module} (call {n.call}): {_metrics(n.metrics)}"))
    return lines


def _metrics(m: Optional[Metrics]) -> str:
    if m is None:
        return "-"
    if m.problem:
        return m.problem
    cosine = "n/a" if m.cosine is None else f"{m.cosine:.6f}"
    return (
        f"cos {cosine}, max abs {m.max_abs_err:.2e}, max rel {m.max_rel_err:.2e}, "
        f"<1/1000 {m.one_thousandth_ratio:.1%}, <5/1000 {m.five_thousandths_ratio:.1%}"
        + (f", NaN/Inf mismatches {m.nan_inf_mismatch}" if m.nan_inf_mismatch else "")
    )


VERDICT_STYLE = {"passed": ("PASS", "green"), "diverged": ("FAIL", "bold red"), "raised": ("RAISED", "bold red"),
                 "error": ("ERROR", "bold red"), "setup error": ("SETUP ERROR", "bold red"),
                 "not supported": ("NOT SUPPORTED", "bold yellow"), "timed out": ("TIMED OUT", "bold red")}
# column -> (minimum width, wrap): names and figures stay on one line; op lists fold
COLUMNS = {"case": (4, False), "run": (7, False), "verdict": (6, False), "outputs": (24, False),
           "gradients": (24, False), "after step": (24, False), "state changes": (24, False),
           "first divergent / raised in": (20, True), "fused NPU kernels": (20, True),
           "CPU fallback ops": (16, True), "float64": (8, True)}
# columns left out of the table when no case has a figure for them (no training, no state changes)
OPTIONAL_COLUMNS = ("gradients", "after step", "state changes")


def _where(case: CaseResult) -> str:
    if case.first_divergent:
        return case.first_divergent.divergent.module
    if case.raised_in:
        return f"raised in {_raised(case.raised_in)}"
    return "-"


def render(report: ParityReport) -> Group:
    """The report as a Rich renderable: a summary table, then what went wrong in failing cases."""
    table = Table(title=f"parity: {report.migrated} vs {report.original} (backing {report.backing})")
    rows = []
    for case in report.cases:
        label, style = VERDICT_STYLE[case.verdict]
        coverage = case.coverage
        rows.append((
            case.name,
            case.dtype,
            Text(label, style=style),
            _worst(case.of_kind("output")) if not case.errors else case.verdict,
            _worst(case.of_kind("loss", "grad")),  # the same tensors as report.html's and report.md's columns
            _worst(case.of_kind("after_step")),
            _worst(case.of_kind("after_change")),
            _where(case),
            _ops(coverage.get("fused_npu_ops", {})) if coverage else "-",
            _ops(coverage.get("fallback_ops", {})) if coverage else "-",
            _ops(coverage.get("float64_ops", {})) if coverage else "-",
        ))
    shown = [i for i, column in enumerate(COLUMNS)
             if column not in OPTIONAL_COLUMNS or any(row[i] != "-" for row in rows)]
    for i in shown:
        column = list(COLUMNS)[i]
        width, wrap = COLUMNS[column]
        table.add_column(column, min_width=width, no_wrap=not wrap, overflow="fold")
    for row in rows:
        table.add_row(*(row[i] for i in shown))
    parts: List[Any] = [table]
    for case in report.cases:
        if not case.passed:
            parts.extend(_details(case))
    sites = report.site_records
    if sites:
        parts.append(_sites_table(report, sites))
    failed = sum(not c.passed for c in report.cases)
    summary = f"{len(report.cases) - failed}/{len(report.cases)} case(s) passed"
    parts.append(Text(summary, style="green" if not failed else "bold red"))
    unproven = report.not_proven
    if unproven:
        parts.append(Text(f"NOT PROVEN: the fused path of {len(unproven)} numerics-changing site(s) ran in no run "
                          f"(the comparison used the original code there): "
                          + ", ".join(r.site for r in unproven), style="bold yellow"))
    return Group(*parts)


SITE_STYLE = {"proven": "green", NOT_PROVEN: "bold yellow", NOT_LOADED: "dim"}


def _sites_table(report: ParityReport, sites: List[SiteRecord]) -> Table:
    """Per rewritten site and run: ``ran n/m`` or why the original code ran there."""
    table = Table(title="what ran at each rewritten site (the helper's per-site record)")
    table.add_column("site", no_wrap=True)
    for case in report.cases:
        table.add_column(Text(case.label), overflow="fold", min_width=12)
    table.add_column("status", no_wrap=True)
    for record in sites:  # Text: a reason such as "[B, N, S, D]" is not markup
        table.add_row(Text(record.site), *(Text(ran(record.runs.get(c.label, {}))) for c in report.cases),
                      Text(record.status, style=SITE_STYLE.get(record.status, "")))
    return table
