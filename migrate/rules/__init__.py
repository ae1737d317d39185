"""All rules, found by importing every module of this package (one rule class per module)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from functools import lru_cache
from typing import Iterable, List, Optional, Type

from npu_migrate.migrate.rules.base import Rule

_NOT_RULES = {"base"}
# NPU4xx codes are notes and advice (DESIGN: "NPU4xx opt-in/noisy"): a run emits them only when
# --select names them (``NPU4``, ``NPU40``, ``NPU401``), never by default or through ``--select NPU``
OPT_IN = "NPU4"


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


def _selected(code: str, select: Optional[List[str]]) -> bool:
    """An opt-in code only by a pattern that reaches into its group (``OPT_IN`` or longer)."""
    if code.startswith(OPT_IN):
        return any(p.strip().upper().startswith(OPT_IN) and code.startswith(p.strip().upper()) for p in select or ())
    return not select or _matches(code, select)


def code_enabled(code: str, select: Optional[List[str]], ignore: Optional[List[str]]) -> bool:
    return _selected(code, select) and not _matches(code, ignore or ())


def select_rules(select: Optional[List[str]] = None, ignore: Optional[List[str]] = None) -> List[Type[Rule]]:
    """Rules with at least one code selected and not ignored (prefixes allowed; opt-in codes only
    when named, ``OPT_IN``)."""
    return [rule for rule in all_rules() if any(code_enabled(c, select, ignore) for c in rule.all_codes())]
