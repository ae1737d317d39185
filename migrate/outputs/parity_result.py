"""A ``migrate parity --json`` result as the reports show it: one row per case, the same figures on
report.html, in report.md and (from the same tensors) in the terminal's table: outputs, gradients
(the losses and the parameters' gradients), the outputs after the optimizer steps and the outputs after
the state changes, each counted apart."""

from __future__ import annotations

from typing import Dict, List, Optional

COLUMNS = ("case", "dtype", "result", "outputs", "gradients", "after step", "state changes",
           "first divergent module", "CPU fallback ops", "problems")


def metric(tensors: List[dict]) -> str:
    """``3/3 ok, cos 0.999990, abs 1.2e-07`` over the compared tensors; ``-`` when there are none."""
    if not tensors:
        return "-"
    ok = sum(1 for t in tensors if t.get("passed"))
    cosines = [t["cosine"] for t in tensors if t.get("cosine") is not None]
    worst = f", cos {min(cosines):.6f}" if cosines else ""
    abs_errs = [t["max_abs_err"] for t in tensors if t.get("max_abs_err") is not None]
    return f"{ok}/{len(tensors)} ok{worst}" + (f", abs {max(abs_errs):.1e}" if abs_errs else "")


def rows(parity: Optional[dict]) -> List[Dict[str, str]]:
    """One dict per case, keyed by ``COLUMNS``."""
    out = []
    for case in (parity or {}).get("cases", []):
        divergent = case.get("first_divergent_module") or {}
        fallback = ", ".join(f"{op} x{n}" for op, n in (case.get("op_coverage", {}).get("fallback_ops") or {}).items())
        out.append({
            "case": str(case.get("name")), "dtype": str(case.get("dtype")),
            "result": "PASS" if case.get("passed") else "FAIL",
            "outputs": metric(case.get("outputs", [])), "gradients": metric(case.get("gradients", [])),
            "after step": metric(case.get("after_step", [])),
            "state changes": metric(case.get("after_change", [])),
            "first divergent module": str(divergent.get("module", "-")),
            "CPU fallback ops": fallback or "none",
            "problems": "; ".join([*case.get("errors", []), *case.get("weight_problems", [])]),
        })
    return out


def verdict(parity: dict) -> str:
    cases = parity.get("cases", [])
    passed = sum(1 for c in cases if c.get("passed"))
    text = f"{'passed' if parity.get('passed') else 'FAILED'}: {passed}/{len(cases)} case(s) passed"
    unproven = [s for s in parity.get("sites", []) if s.get("status") == "not proven"]
    return text + (f"; NOT PROVEN: {len(unproven)} numerics-changing site(s) never ran fused" if unproven else "")


def run_labels(parity: Optional[dict]) -> List[str]:
    """The runs of the per-site table: ``case [dtype]``."""
    return [f"{c.get('name')} [{c.get('dtype')}]" for c in (parity or {}).get("cases", [])]


def ran(counts: dict) -> str:
    """``ran n/m`` at a site in one run, with the commonest fallback reason; ``not reached``."""
    calls, fused = counts.get("calls", 0), counts.get("fused", 0)
    if not calls:
        return "not reached"
    fallbacks = counts.get("fallbacks") or {}
    why = f"; fell back {max(fallbacks.values())}x: {max(fallbacks, key=fallbacks.get)}" if fallbacks else ""
    return f"ran {fused}/{calls}{why}"


def site_rows(parity: Optional[dict]) -> List[Dict[str, str]]:
    """One dict per rewritten site: ``site``, ``status`` and one key per run label (``ran n/m`` or why not)."""
    labels = run_labels(parity)
    return [{"site": str(s.get("site")), "status": str(s.get("status")),
             **{label: ran((s.get("runs") or {}).get(label, {})) for label in labels}}
            for s in (parity or {}).get("sites", [])]
