"""Localisation: record every module call, then name the first module whose output diverges
while its inputs still agree.

Calls are recorded when they finish (forward hooks), so a module comes after everything it
called: the first divergent call in that order is the innermost one. A call is identified by the
module's qualified name and how many times that module had been called before, so modules that
run several times (a shared norm, a loop over layers) line up across the two sides.

The hooks are observers (``npu_glue.OBSERVER``): a fused path that computes a module's result
without calling it (NPU322's add + RMSNorm) runs as it runs without them, and that module's calls
are missing on the migrated side (calls are paired by key; an unpaired one is not judged).

A forward that raises is localised the same way: the hooks also run when a forward raises
(``always_call``), innermost module first, so the first module whose forward raised the error
that escaped the model (or one it was raised from) is where it happened.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch

from .coverage import exception_chain
from .criteria import Criteria
from .metrics import Metrics, compare
from .outputs import flatten

ROOT = "(model)"
NEIGHBOURS = 2  # calls listed on each side of the first divergent one


class ModuleRecorder:
    """Forward hooks on every module; ``calls`` lists ``{module, call, inputs, outputs}`` dicts
    (only with ``keep_tensors``), ``raised`` the ``(module, call, error)`` of forwards that raised."""

    def __init__(self, model: torch.nn.Module, keep_tensors: bool = True):
        self.calls: List[dict] = []
        self.raised: List[Tuple[str, int, BaseException]] = []
        self._keep = keep_tensors
        self._counts: Dict[str, int] = {}
        self._pending: Dict[str, List[dict]] = {}  # per module, a stack (a module may recurse)
        self._handles = []
        for name, module in model.named_modules():
            name = name or ROOT
            self._handles.append(module.register_forward_pre_hook(self._pre(name), with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._post(name), with_kwargs=True, always_call=True))

    def _pre(self, name: str):
        def hook(module, args, kwargs):
            call = self._counts.get(name, 0)
            self._counts[name] = call + 1
            inputs = list(flatten(args).values()) + list(flatten(kwargs).values()) if self._keep else []
            self._pending.setdefault(name, []).append({"module": name, "call": call, "inputs": inputs})

        hook.npu_glue_observer = True  # it only records (npu_glue.OBSERVER): a fast path may skip the module
        return hook

    def _post(self, name: str):
        def hook(module, args, kwargs, output):
            record = self._pending[name].pop()
            error = sys.exc_info()[1]
            if output is None and error is not None:  # called because the forward raised
                self.raised.append((name, record["call"], error))
            elif self._keep:
                record["outputs"] = flatten(output)
                self.calls.append(record)

        hook.npu_glue_observer = True
        return hook

    def raised_in(self, error: BaseException) -> Optional[Tuple[str, int]]:
        """``(module, call)`` of the innermost forward that raised ``error`` (or an error it was
        raised from or while handling); None when no module's forward did."""
        chain = [id(e) for e in exception_chain(error)]
        for rank in range(len(chain)):  # the innermost cause first
            for module, call, raised in self.raised:
                if id(raised) == chain[-1 - rank]:
                    return module, call
        return None

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


@dataclass
class CallResult:
    module: str
    call: int
    passed: bool
    inputs_agree: Optional[bool]  # only checked for failing calls
    worst: Optional[str] = None  # the output tensor that failed, or the worst one
    metrics: Optional[Metrics] = None

    def to_json(self) -> dict:
        return {
            "module": self.module,
            "call": self.call,
            "passed": self.passed,
            "inputs_agree": self.inputs_agree,
            "tensor": self.worst,
            "metrics": self.metrics.to_json() if self.metrics else None,
        }


@dataclass
class Localisation:
    """The first divergent call and its neighbours in execution order."""

    divergent: CallResult
    neighbours: List[CallResult] = field(default_factory=list)

    def to_json(self) -> dict:
        return {**self.divergent.to_json(), "neighbours": [n.to_json() for n in self.neighbours]}


def _agree(original: List[torch.Tensor], migrated: List[torch.Tensor], criteria: Criteria) -> bool:
    if len(original) != len(migrated):
        return False
    return all(criteria.judge(compare(o, m, criteria.rel_err)) is None for o, m in zip(original, migrated))


def _judge_call(original: dict, migrated: dict, criteria: Criteria) -> Optional[CallResult]:
    """The call's verdict from the output tensors both sides produced; None if there are none.

    Inputs are only compared for failing calls (that is where the answer matters)."""
    judged = []
    for name in original["outputs"]:
        if name in migrated["outputs"]:
            metrics = compare(original["outputs"][name], migrated["outputs"][name], criteria.rel_err)
            judged.append((name, metrics, criteria.judge(metrics) is None))
    if not judged:
        return None
    failing = [j for j in judged if not j[2]]
    name, metrics, passed = failing[0] if failing else min(
        judged, key=lambda j: 1.0 if j[1].cosine is None else j[1].cosine
    )
    inputs_agree = None if passed else _agree(original["inputs"], migrated["inputs"], criteria)
    return CallResult(original["module"], original["call"], passed, inputs_agree, name, metrics)


def first_divergent(original: List[dict], migrated: List[dict], criteria: Criteria) -> Optional[Localisation]:
    """The first call, in the original's execution order, whose outputs fail ``criteria`` while
    its inputs pass; failing that, the first failing call at all. None when every call agrees."""
    by_key = {(c["module"], c["call"]): c for c in migrated}
    results = []
    for call in original:
        twin = by_key.get((call["module"], call["call"]))
        result = _judge_call(call, twin, criteria) if twin else None
        if result is not None:
            results.append(result)
    failing = [i for i, r in enumerate(results) if not r.passed]
    if not failing:
        return None
    index = next((i for i in failing if results[i].inputs_agree), failing[0])
    neighbours = results[max(0, index - NEIGHBOURS): index] + results[index + 1: index + 1 + NEIGHBOURS]
    return Localisation(results[index], neighbours)
