"""``changes.patch``: one git-style unified diff of every change (``migrate.diffs``), for ``git apply``
in PATH.

Lines are split on ``\\n`` only (a ``\\r`` stays part of its line, as git sees it), a last line
without a newline gets git's ``\\ No newline at end of file`` marker, and a new file (a vendored
helper) is diffed against ``/dev/null`` with ``new file mode 100644``. Paths are relative to PATH.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Sequence

from ..diffs import NO_NEWLINE, Change, file_diff  # noqa: F401 (the patch's parts, read here too)
from ..discovery import git_toplevel


def build_patch(changes: Sequence[Change]) -> str:
    return "".join(file_diff(c) for c in changes)


def apply_command(root: Path, patch: Path) -> str:
    """The shell command that applies ``patch`` to PATH.

    Inside a git work tree, ``git apply`` reads patch paths from the top of the work tree and
    silently skips the others, so a PATH below the top needs ``--directory``.
    """
    root = Path(root).resolve()
    top = git_toplevel(root)
    if top is None or top.resolve() == root:
        return f"git -C {shlex.quote(str(root))} apply {shlex.quote(str(patch))}"
    sub = root.relative_to(top.resolve()).as_posix()
    return f"git -C {shlex.quote(str(top))} apply --directory={shlex.quote(sub)} {shlex.quote(str(patch))}"
