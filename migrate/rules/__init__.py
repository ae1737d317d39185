"""All rules, found by importing every module of this package (one rule class per module)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from functools import lru_cache
from typing import Iterable, List, Optional, Type

from npu_migrate.migrate.rules.base import Rule

_NOT_RULES = {"base"}


@lru_cache(maxsize=1)
def all_rules() -> tuple:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name in _NOT_RULES or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module.__name__ and hasattr(obj, "code"):
                found.append(obj)
    codes = {}
    for rule in found:
        for code in rule.all_codes():
            if code in codes:
                raise RuntimeError(f"diagnostic code {code} claimed by both {codes[code].__name__} and {rule.__name__}")
            codes[code] = rule
    return tuple(sorted(found, key=lambda r: r.code))


def _matches(code: str, patterns: Iterable[str]) -> bool:
    """``NPU2`` selects every NPU2xx code; ``NPU201`` only itself."""
    return any(code.startswith(p.strip().upper()) for p in patterns if p.strip())


def select_rules(select: Optional[List[str]] = None, ignore: Optional[List[str]] = None) -> List[Type[Rule]]:
    """Rules with at least one code selected and not ignored (prefixes allowed)."""
    chosen = []
    for rule in all_rules():
        codes = [c for c in rule.all_codes() if (not select or _matches(c, select)) and not _matches(c, ignore or ())]
        if codes:
            chosen.append(rule)
    return chosen


def code_enabled(code: str, select: Optional[List[str]], ignore: Optional[List[str]]) -> bool:
    return (not select or _matches(code, select)) and not _matches(code, ignore or ())
