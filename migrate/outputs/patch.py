"""``changes.patch``: one git-style unified diff of every change, for ``git apply`` in PATH.

Lines are split on ``\\n`` only (a ``\\r`` stays part of its line, as git sees it), a last line
without a newline gets git's ``\\ No newline at end of file`` marker, and a new file (a vendored
helper) is diffed against ``/dev/null`` with ``new file mode 100644``. Paths are relative to PATH.
"""

from __future__ import annotations

import difflib
import shlex
from pathlib import Path
from typing import List, Sequence

from npu_migrate.migrate.discovery import git_toplevel
from npu_migrate.migrate.outputs.changes import Change

NO_NEWLINE = "\\ No newline at end of file\n"


def _lines(text: str) -> List[str]:
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def file_diff(change: Change) -> str:
    if change.diff is not None:
        return change.diff
    path = change.path
    header = [f"diff --git a/{path} b/{path}\n"]
    if change.old is None:
        header += ["new file mode 100644\n", "--- /dev/null\n", f"+++ b/{path}\n"]
    else:
        header += [f"--- a/{path}\n", f"+++ b/{path}\n"]
    body = _added(change.new) if change.old is None else \
        list(difflib.unified_diff(_lines(change.old), _lines(change.new), n=3))[2:]  # drop its own ---/+++
    out = header
    for line in body:
        out.append(line if line.endswith("\n") else line + "\n" + NO_NEWLINE)
    return "".join(out)


def _added(text: str) -> List[str]:
    """The hunk of a new file, as ``difflib.unified_diff`` gives it (every line added; a vendored
    helper is thousands of lines, in every migrated directory), without matching the lines."""
    lines = _lines(text)
    if not lines:
        return []
    span = "1" if len(lines) == 1 else f"1,{len(lines)}"
    return [f"@@ -0,0 +{span} @@\n", *("+" + line for line in lines)]


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
