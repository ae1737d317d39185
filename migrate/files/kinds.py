"""The file kinds npu-migrate reads besides Python, in the order they are tried (the first whose
``matches`` accepts a path wins). Adding a kind is one module with a ``FileKind`` subclass (see
``migrate/files/base.py``) and one line here; its codes are declared in ``migrate/files/codes.py``
and its fixtures go to ``fixtures/files/<CODE>_<slug>/``.
"""

from __future__ import annotations

from typing import Optional, Tuple

from .base import FileKind
from .conda_env import CondaEnvironment
from .config_file import ConfigFile
from .dockerfile import Dockerfile
from .dotenv import DotEnv
from .makefile import Makefile
from .pyproject import Pyproject
from .requirements_txt import Requirements
from .setup_cfg import SetupCfg
from .setup_py import SetupPy
from .shell import ShellScript

KINDS: Tuple[FileKind, ...] = (
    Requirements(),
    Pyproject(),
    SetupCfg(),
    SetupPy(),  # matches no path: setup.py is a Python file, scanned after the Python rules
    CondaEnvironment(),
    ShellScript(),
    Dockerfile(),
    Makefile(),
    DotEnv(),
    ConfigFile(),  # any other YAML/JSON file; after the conda environment files
)
BY_NAME = {kind.name: kind for kind in KINDS}


def kind_of(path: str, head: bytes = b"") -> Optional[FileKind]:
    """The kind of the file at ``path`` (relative, forward slashes), None when npu-migrate does not read it."""
    return next((kind for kind in KINDS if kind.matches(path, head)), None)
