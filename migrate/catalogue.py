"""The code catalogue: every diagnostic code's declaration, the tool's (``diagnostics``), each rule's
(``rules``) and the dependency and launcher files' (``files.codes``). It sits above the rules, so
that listings, doc pages, ``migrate explain`` and the SARIF rules read one catalogue and nothing
below the rules imports them."""

from __future__ import annotations

import sys
from typing import Dict

from . import diagnostics
from .diagnostics import DiagnosticCode
from .files.codes import DECLARATIONS


def declarations() -> Dict[str, DiagnosticCode]:
    """Every code's declaration, sorted: the tool's, each rule's (the rules are looked up at call
    time, so a test's stand-ins count) and the dependency and launcher files' (``migrate.files.codes``)."""
    stored = diagnostics.stored()
    if stored is not None and f"{__package__}.rules" not in sys.modules:
        return dict(stored)  # a warm run: the rules (and libcst) stay unimported
    from . import rules

    declared = diagnostics.tool_declarations()
    for rule in rules.all_rules():
        declared.update((d.code, d) for d in rule.declarations)
    for d in DECLARATIONS:
        if d.code in declared:
            raise RuntimeError(f"diagnostic code {d.code} is declared twice (migrate.files.codes and a rule)")
        declared[d.code] = d
    return dict(sorted(declared.items()))


def all_codes() -> Dict[str, str]:
    """Every diagnostic code with its one-line summary (tool codes and rule codes)."""
    return {code: declared.summary for code, declared in declarations().items()}
