"""The ``migrate`` command line: one module per command, all registered on one Typer app.

Command modules import only Typer, Rich's console and small modules at start-up; each command
imports what it needs (libcst, torch, the outputs) when it runs, so ``migrate --help`` is quick.
"""

import os
import warnings

from .app import app
from . import demo, explain, ops, parity, parity_init, report, run  # noqa: F401  (register the commands)

# torch warns at import when NumPy is missing ("Failed to initialize NumPy"); nothing here needs
# NumPy, so the warning is noise, in this process and in the parity workers it starts.
NUMPY_WARNING = "ignore:Failed to initialize NumPy:UserWarning"


def quiet_numpy_warning() -> None:
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
    current = os.environ.get("PYTHONWARNINGS", "")
    if NUMPY_WARNING not in current.split(","):
        os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [current, NUMPY_WARNING]))


def main() -> None:
    quiet_numpy_warning()
    app()
