"""Shell launchers: ``*.sh``/``*.bash``/``*.zsh`` scripts, Slurm/PBS batch files (``*.slurm``,
``*.sbatch``, ``*.pbs``; their ``#SBATCH`` lines are read too) and extension-less files whose ``#!``
line names a shell. Their commands and variables go through ``migrate.files.commands``.
"""

from __future__ import annotations

import re

from npu_migrate.migrate.files.base import FileKind, Scan
from npu_migrate.migrate.files.commands import read_shell, slurm_directive
from npu_migrate.migrate.files.environment import Launcher
from npu_migrate.migrate.files.shell_words import parse

SUFFIXES = (".sh", ".bash", ".zsh", ".ksh", ".slurm", ".sbatch", ".pbs")
_SHEBANG = re.compile(rb"^#![ \t]*\S*/(env[ \t]+)?(ba|z|k|da|a)?sh\b")
_SBATCH = re.compile(r"^#(SBATCH|PBS)[ \t]+(.*)$", re.M)
LAUNCHER_TRIGGERS = (b"CUDA", b"cuda", b"NCCL", b"nccl", b"NVIDIA", b"nvidia", b"gpu", b"GPU", b"CUDNN", b"cudnn",
                     b"pip", b"conda", b"torch")


class ShellScript(FileKind):
    name = "shell"
    language = "bash"
    triggers = LAUNCHER_TRIGGERS

    def matches(self, path: str, head: bytes = b"") -> bool:
        return path.lower().endswith(SUFFIXES) or bool(head and _SHEBANG.match(head))

    def scan(self, scan: Scan) -> None:
        launcher = Launcher(scan)
        for match in _SBATCH.finditer(scan.text):
            slurm_directive(launcher, match.group(2), match.start(2))
        read_shell(launcher, parse(scan.text))
        launcher.finish()
