"""One file's change and its git-style unified diff. The workers diff each changed file as they
finish it (``runner``, ``files.run``) and the outputs join the diffs into ``changes.patch``
(``outputs.patch``), so this floor sits below both.

Lines are split on ``\\n`` only (a ``\\r`` stays part of its line, as git sees it), a last line
without a newline gets git's ``\\ No newline at end of file`` marker, and a new file (a vendored
helper) is diffed against ``/dev/null`` with ``new file mode 100644``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import List, Optional


@dataclass(frozen=True)
class Change:
    path: str  # relative to the root, forward slashes
    old: Optional[str]  # None for a new file
    new: str
    helper: bool = False  # a vendored helper module (written before the files that import it)
    diff: Optional[str] = None  # its diff, when the worker made it already


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
