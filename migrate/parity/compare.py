"""Comparing the two sides' results for one case and dtype."""

from __future__ import annotations

from typing import Dict, List, Optional

import torch

from npu_migrate.migrate.parity.criteria import Criteria, default_criteria
from npu_migrate.migrate.parity.localise import first_divergent
from npu_migrate.migrate.parity.metrics import compare
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
            results.append(TensorResult(kind, name, metrics, criteria.judge(metrics)))
    return results


def _side_error(side: str, result: Optional[dict]) -> Optional[str]:
    if result is None:
        return f"{side} side: no result"
    if result.get("error"):
        return f"{side} side: {result['error']}"
    return None


def compare_case(case: Case, dtype: str, original: Optional[dict], migrated: Optional[dict]) -> CaseResult:
    """The verdict for ``case`` in ``dtype`` from each side's worker result."""
    override = case.tolerance.get(dtype, {})
    criteria = default_criteria()[dtype].with_overrides(override)
    result = CaseResult(case.name, dtype, criteria, override.get("reason"))

    error = _side_error("original", original) or _side_error("migrated", migrated)
    if error:
        result.errors.append(error)
        return result
    result.weight_problems = list(migrated["weight_problems"])
    if result.weight_problems:
        return result
    result.coverage = migrated.get("coverage", {})

    result.tensors = compare_tensors("output", original["outputs"], migrated["outputs"], criteria)
    if case.train:
        o, m = original["train"], migrated["train"]
        result.tensors += compare_tensors("loss", {"loss": o["loss"]}, {"loss": m["loss"]}, criteria)
        result.tensors += compare_tensors("grad", o["grads"], m["grads"], criteria)
        result.tensors += compare_tensors("after_step", o["after_step"], m["after_step"], criteria)
    if not result.passed:
        result.first_divergent = first_divergent(original["modules"], migrated["modules"], criteria)
    return result
