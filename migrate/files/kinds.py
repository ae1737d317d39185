"""The file kinds npu-migrate reads besides Python, in the order they are tried (the first whose
``matches`` accepts a path wins). Adding a kind is one module with a ``FileKind`` subclass (see
``migrate/files/base.py``) and one line here; its codes are declared in ``migrate/files/codes.py``
and its fixtures go to ``fixtures/files/<CODE>_<slug>/``.
"""

from __future__ import annotations

from typing import Optional, Tuple

from npu_migrate.migrate.files.base import FileKind
from npu_migrate.migrate.files.conda_env import CondaEnvironment
from npu_migrate.migrate.files.config_file import ConfigFile
from npu_migrate.migrate.files.dockerfile import Dockerfile
from npu_migrate.migrate.files.dotenv import DotEnv
from npu_migrate.migrate.files.makefile import Makefile
from npu_migrate.migrate.files.pyproject import Pyproject
from npu_migrate.migrate.files.requirements_txt import Requirements
from npu_migrate.migrate.files.setup_cfg import SetupCfg
from npu_migrate.migrate.files.setup_py import SetupPy
from npu_migrate.migrate.files.shell import ShellScript

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
