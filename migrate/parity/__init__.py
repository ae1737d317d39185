"""``migrate parity``: run the original and the migrated model side by side and compare them.

``run_parity`` runs a spec and returns a ``ParityReport``; ``render`` turns it into a Rich
renderable for the console. Nothing here prints.
"""

from .report import CaseResult, ParityReport, render
from .run import default_migrated, run_parity
from .spec import SpecError, load_spec

__all__ = ["CaseResult", "ParityReport", "SpecError", "default_migrated", "load_spec", "render", "run_parity"]
