"""The shared floor of the residual detectors (``rules/<family>/residual.py``): a ``Family`` declares
what the residual pass (``migrate/residual.py``) looks for in each function and how it reports a
component no rule of the family covered; ``peel`` and ``values`` are the detectors' common readers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, FrozenSet, List, Optional, Set

from ..view import Value, View
from ..view.ops import Op


@dataclass(frozen=True)
class Family:
    name: str
    codes: FrozenSet[str]  # a finding with one of these codes covers a detection
    report: str  # the code a residual finding gets
    record: str  # its op-table record (summary and plan)
    words: FrozenSet[str]  # the function must name one of these for the detector to run
    detect: Callable[[View], List[Value]]
    form: Callable[[Value], str]


def peel(value: Optional[Value], ops=(Op.CAST, Op.SAME)) -> Optional[Value]:
    while value is not None and value.op in ops:
        value = value.input
    return value


def values(view: View, *ops: str) -> List[Value]:
    seen: Set[int] = set()
    found = []
    for value in view.values.values():
        if value.op in ops and view.home(value) and id(value) not in seen:
            seen.add(id(value))
            found.append(value)
    return found
