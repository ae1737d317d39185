"""The shared floor of the residual detectors (``rules/<family>/residual.py``): a ``Family`` declares
what the residual pass (``migrate/residual.py``) looks for in each function and how it reports a
component no rule of the family covered; ``peel`` and ``values`` are the detectors' common readers.

A family's rules are the rules of its package (``rules/<family>/``); the codes that cover a detection
and the code a residual finding gets are derived from their declarations (every code the rules
declare; the one code they report without rewriting), so a new rule of the family, or a new code of
one, covers its detections without a second list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, FrozenSet, List, Optional, Set, Tuple

from ..view import Value, View
from ..view.ops import Op


@dataclass(frozen=True)
class Family:
    name: str
    package: str  # the family's package (``rules/<family>/``): its rules' codes cover a detection
    record: str  # the op-table record of a residual finding (summary and plan)
    words: FrozenSet[str]  # the function must name one of these for the detector to run
    detect: Callable[[View], List[Value]]
    form: Callable[[Value], str]
    also: FrozenSet[str] = frozenset()  # codes of other rules that cover it too (a library reported instead)
    # triage: whether a function (``triage.Function``, with the ones it calls) of a module (its ``Words``) may hold the core
    computes: Optional[Callable[[object, object], bool]] = None
    # a name containing one of these (lower case) counts as naming the family (``self.scale_mask_softmax``)
    word_parts: FrozenSet[str] = frozenset()

    def named_in(self, names) -> bool:
        """Whether a function naming ``names`` may hold a detection (the cheap test before its view)."""
        return bool(self.words & names) or any(part in name.lower() for name in names for part in self.word_parts)

    def may_find(self, words) -> bool:
        """Triage (``migrate.triage``): whether a module with these words can hold a detection."""
        return any(self.named_in(f.names) and (self.computes is None or self.computes(words, words.reach(f)))
                   for f in words.functions)

    def enabled(self, code_enabled: Callable[[str], bool]) -> bool:
        """Whether the residual pass looks for this family: it has rules loaded and its code is on."""
        return self.report is not None and code_enabled(self.report)

    @property
    def rules(self) -> Tuple[type, ...]:
        """The rules of the family's package (looked up at call time, as ``rules.all_rules``)."""
        from . import all_rules

        return tuple(rule for rule in all_rules() if rule.__module__.startswith(f"{self.package}."))

    @property
    def codes(self) -> FrozenSet[str]:
        """A finding with one of these codes covers a detection."""
        return frozenset(code for rule in self.rules for code in rule.codes) | self.also

    @property
    def report(self) -> Optional[str]:
        """The code a residual finding gets: the one code of the family's rules that reports."""
        reported = [d.code for rule in self.rules for d in rule.declarations if not d.rewrites]
        if not self.rules:
            return None  # no rule of the family is loaded (a test's stand-in rules): nothing to report with
        if len(reported) != 1:
            raise ValueError(f"family {self.name}: its rules must report exactly one code without rewriting, "
                             f"not {reported}")
        return reported[0]


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
