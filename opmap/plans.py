"""Named plans, read by name: the user-facing plan of a site a rule reports without a record of its
own (an attention the kernel cannot express, a router it does not read) is data, declared in the
family's op-table file (its ``plans:`` section, validated by ``records.parse_plan``), and the rule
modules take it at import: ``UNDERFLOW_PLAN = plan("attention.underflow")``.

A plan's name is ``<file stem>.<name>``: ``{name: underflow, plan: manual, detail: ...}`` under
``plans:`` in ``opmap/attention.yaml`` is ``attention.underflow``. A name the file does not declare
fails the import of the module that asks for it. A detail may be a template whose ``{fields}`` the
rule fills from the site (``Fallback.filled``). Only the built-in files declare plans: the rules
read them at import, so a ``plans:`` section in a user's ``--opmap`` file could change nothing and
the loader refuses it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Dict, Set

from . import BUILTIN_DIR
from .records import Fallback, NamedPlan
from .table import load_sections

_asked: Set[str] = set()  # the names asked for in this process (a plan no module asks for is dead data)


@lru_cache(maxsize=None)
def builtin_plans(stem: str) -> Dict[str, NamedPlan]:
    """The plans of the built-in file ``opmap/<stem>.yaml``, by name (loaded once)."""
    path = BUILTIN_DIR / f"{stem}.yaml"
    if not path.is_file():
        raise LookupError(f"no built-in op-table file {path.name} for the plans named {stem}.*")
    return {named.name: named for named in load_sections(path).plans}


def plan(name: str) -> Fallback:
    """The built-in plan ``name`` (``"attention.underflow"``: the plan ``underflow`` of
    ``opmap/attention.yaml``). A name the file does not declare raises ``LookupError`` where it is
    asked for: at the import of the rule module."""
    stem, _, local = name.partition(".")
    declared = builtin_plans(stem)
    if name not in declared:
        known = ", ".join(sorted(n.split(".", 1)[1] for n in declared)) or "none"
        raise LookupError(f"opmap/{stem}.yaml declares no plan named {local!r} (its plans: {known})")
    _asked.add(name)
    return declared[name].fallback


def asked() -> Set[str]:
    """The plan names ``plan()`` has returned in this process."""
    return set(_asked)
