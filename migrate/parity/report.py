"""The parity report: per case and dtype results, their JSON form and the Rich rendering."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from rich.console import Group
from rich.table import Table
from rich.text import Text

from npu_migrate.migrate.parity.criteria import Criteria
from npu_migrate.migrate.parity.localise import Localisation
from npu_migrate.migrate.parity.metrics import Metrics

MAX_LISTED = 5  # failing tensors listed per case in the console


@dataclass
class TensorResult:
    """One compared tensor: a model output, the loss, a gradient or an output after the step."""

    kind: str  # "output" | "loss" | "grad" | "after_step"
    name: str
    metrics: Optional[Metrics]
    failure: Optional[str] = None  # why it fails; None when it passes

    @property
    def passed(self) -> bool:
        return self.failure is None

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "name": self.name,
            "passed": self.passed,
            "failure": self.failure,
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

    @property
    def passed(self) -> bool:
        return not self.errors and not self.weight_problems and bool(self.tensors) and all(
            t.passed for t in self.tensors
        )

    def of_kind(self, *kinds: str) -> List[TensorResult]:
        return [t for t in self.tensors if t.kind in kinds]

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "passed": self.passed,
            "errors": self.errors,
            "weight_problems": self.weight_problems,
            "criteria": self.criteria.to_json(),
            "tolerance_reason": self.tolerance_reason,
            "outputs": [t.to_json() for t in self.of_kind("output")],
            "gradients": [t.to_json() for t in self.of_kind("loss", "grad")],
            "after_step": [t.to_json() for t in self.of_kind("after_step")],
            "first_divergent_module": self.first_divergent.to_json() if self.first_divergent else None,
            "op_coverage": self.coverage,
        }


@dataclass
class ParityReport:
    spec: str
    original: str
    migrated: str
    backing: str
    cases: List[CaseResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    def to_json(self) -> Dict[str, Any]:
        return {
            "passed": self.passed,
            "spec": self.spec,
            "original": self.original,
            "migrated": self.migrated,
            "backing": self.backing,
            "cases": [c.to_json() for c in self.cases],
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


def _details(case: CaseResult) -> List[Text]:
    """Lines explaining a failing case."""
    lines = [Text(f"{case.name} [{case.dtype}]", style="bold red")]
    lines += [Text(f"  {error}") for error in case.errors]
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


def render(report: ParityReport) -> Group:
    """The report as a Rich renderable: a summary table, then what went wrong in failing cases."""
    table = Table(title=f"parity: {report.migrated} vs {report.original} (backing {report.backing})")
    for column in ("case", "dtype", "verdict", "outputs", "gradients", "first divergent module", "CPU fallback ops", "float64"):
        table.add_column(column, overflow="fold")
    for case in report.cases:
        verdict = Text("PASS", style="green") if case.passed else Text("FAIL", style="bold red")
        divergent = case.first_divergent.divergent.module if case.first_divergent else "-"
        table.add_row(
            case.name,
            case.dtype,
            verdict,
            _worst(case.of_kind("output")) if not case.errors else "error",
            _worst(case.of_kind("loss", "grad", "after_step")),
            divergent,
            _ops(case.coverage.get("fallback_ops", {})) if case.coverage else "-",
            _ops(case.coverage.get("float64_ops", {})) if case.coverage else "-",
        )
    parts: List[Any] = [table]
    for case in report.cases:
        if not case.passed:
            parts.extend(_details(case))
    failed = sum(not c.passed for c in report.cases)
    summary = f"{len(report.cases) - failed}/{len(report.cases)} case(s) passed"
    parts.append(Text(summary, style="green" if not failed else "bold red"))
    return Group(*parts)
