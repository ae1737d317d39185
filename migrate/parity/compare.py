"""Comparing the two sides' results for one case and run (a dtype or AMP)."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch

from npu_migrate.migrate.parity.criteria import Criteria, default_criteria
from npu_migrate.migrate.parity.failures import ERROR, RAISED, SETUP, TIMED_OUT, UNSUPPORTED
from npu_migrate.migrate.parity.localise import first_divergent
from npu_migrate.migrate.parity.metrics import compare
from npu_migrate.migrate.parity.precision import dtype_name, precision
from npu_migrate.migrate.parity.report import CaseResult, TensorResult
from npu_migrate.migrate.parity.spec import Case


def compare_tensors(kind: str, original: Dict[str, torch.Tensor], migrated: Dict[str, torch.Tensor],
                    criteria: Criteria) -> List[TensorResult]:
    results = []
    for name in list(original) + [n for n in migrated if n not in original]:
        if name not in migrated:
            results.append(TensorResult(kind, name, None, "missing on the migrated side"))
        elif name not in original:
            results.append(TensorResult(kind, name, None, "missing on the original side"))
        else:
            metrics = compare(original[name], migrated[name], criteria.rel_err)
            results.append(TensorResult(kind, name, metrics, criteria.judge(metrics), dtype_name(original[name].dtype)))
    return results


def _side_failure(side: str, result: Optional[dict]) -> Optional[Tuple[str, str, Optional[dict]]]:
    """``(message, kind, raised_in)`` when the side did not produce results, else None."""
    if result is None:
        return f"{side} side: no result", ERROR, None
    if result.get("error"):
        return f"{side} side: {result['error']}", result.get("kind") or ERROR, result.get("raised_in")
    return None


def _verdict_kind(side: str, kind: str, raised_in: Optional[dict]) -> str:
    """What a side's failure means for the case: an original that cannot run is a setup problem
    (nothing to compare against); a migrated side that raised in the model is a parity failure."""
    if kind in (UNSUPPORTED, TIMED_OUT):
        return kind
    if side == "original" or kind == SETUP:
        return SETUP
    return RAISED if raised_in else ERROR


def compare_case(case: Case, label: str, original: Optional[dict], migrated: Optional[dict]) -> CaseResult:
    """The verdict for ``case`` in run ``label`` (a dtype or ``amp-<dtype>``) from each side's result."""
    override = case.tolerance.get(label, {})
    criteria = default_criteria()[precision(label).criteria_dtype].with_overrides(override)
    result = CaseResult(case.name, label, criteria, override.get("reason"))
    result.sites = dict((migrated or {}).get("sites") or {})
    result.loaded = list((migrated or {}).get("loaded") or [])

    for side, side_result in (("original", original), ("migrated", migrated)):
        failure = _side_failure(side, side_result)
        if failure:
            message, kind, raised_in = failure
            result.errors.append(message)
            result.failure_kind = _verdict_kind(side, kind, raised_in)
            result.raised_in = raised_in
            result.coverage = (migrated or {}).get("coverage", {})
            return result
    result.weight_problems = list(migrated["weight_problems"])
    if result.weight_problems:
        return result
    result.coverage = migrated.get("coverage", {})

    result.tensors = compare_tensors("output", original["outputs"], migrated["outputs"], criteria)
    if case.train:
        o, m = original["train"], migrated["train"]
        result.tensors += compare_tensors("loss", o["loss"], m["loss"], criteria)
        result.tensors += compare_tensors("grad", o["grads"], m["grads"], criteria)
        result.tensors += compare_tensors("after_step", o["after_step"], m["after_step"], criteria)
    if case.changes:
        o, m = original["changes"], migrated["changes"]
        result.tensors += compare_tensors("after_change", o["outputs"], m["outputs"], criteria)
        result.not_applicable = list(o["not_applicable"])
    if not result.passed:
        result.first_divergent = first_divergent(original["modules"], migrated["modules"], criteria)
    return result
