"""Reading ``changes.patch`` back: per file, its hunks and their lines with old/new line numbers.

The HTML page shows these hunks beside the findings, and the SARIF fixes are cut from them, so
both read the very patch that ``git apply`` takes (``migrate report`` rebuilds the page from a
report directory alone). The parser reads the git-style unified diffs that ``patch.py`` writes:
``diff --git`` headers, optional ``new file mode``, ``---``/``+++`` paths, ``@@ -a,b +c,d @@`` hunks
and ``\\ No newline at end of file`` markers.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    pass


@dataclass
class DiffLine:
    kind: str  # " " context, "-" removed, "+" added
    text: str  # without its newline
    old: Optional[int]  # line number in the original file (None for an added line)
    new: Optional[int]  # line number in the migrated file (None for a removed line)
    newline: bool = True  # False where git marked "\ No newline at end of file"


@dataclass
class Hunk:
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: List[DiffLine] = field(default_factory=list)
    _changes: Optional[list] = field(default=None, repr=False, compare=False)

    @property
    def header(self) -> str:
        return f"@@ -{self.old_start},{self.old_count} +{self.new_start},{self.new_count} @@"

    def covers(self, old_line: int) -> bool:
        """Whether ``old_line`` of the original lies in this hunk (its context included)."""
        return self.old_start <= old_line < self.old_start + max(self.old_count, 1)

    def changes(self) -> List[Tuple[int, List[DiffLine], List[DiffLine]]]:
        """The runs of removed/added lines: (first old line they replace, removed, added); made once."""
        if self._changes is None:
            self._changes = self._runs()
        return self._changes

    def _runs(self) -> List[Tuple[int, List[DiffLine], List[DiffLine]]]:
        groups: List[Tuple[int, List[DiffLine], List[DiffLine]]] = []
        next_old = self.old_start if self.old_count else self.old_start + 1
        removed: List[DiffLine] = []
        added: List[DiffLine] = []
        start = next_old
        for line in self.lines + [DiffLine(" ", "", None, None)]:  # a sentinel closes the last run
            if line.kind == " ":
                if removed or added:
                    groups.append((start, removed, added))
                    removed, added = [], []
                if line.old is not None:
                    next_old = line.old + 1
                start = next_old
            elif line.kind == "-":
                removed.append(line)
                next_old = line.old + 1
            else:
                added.append(line)
        return groups


@dataclass
class FileDiff:
    path: str
    new_file: bool = False
    hunks: List[Hunk] = field(default_factory=list)
    vendored_lines: Optional[int] = None  # a new vendored helper, summarised: its line count, no hunks
    _starts: Optional[List[int]] = field(default=None, repr=False, compare=False)

    def hunks_at(self, old_line: int) -> List[Hunk]:
        """The hunks that hold ``old_line`` (found by bisection: hunks are in order and disjoint)."""
        starts = [h.old_start for h in self.hunks] if self._starts is None else self._starts
        self._starts = starts
        at = bisect_right(starts, old_line) - 1
        return [h for h in self.hunks[max(at - 1, 0):at + 2] if h.covers(old_line)]


def parse_patch(text: str, vendored: Callable[[str], bool] = lambda path: False) -> List[FileDiff]:
    """The patch's files. A new file whose path ``vendored`` accepts (the helper this tool writes
    into every package that needs it) is summarised by its line count instead of being read line by
    line: it is the same file each time, and most of a large patch."""
    files: List[FileDiff] = []
    offset = 0  # lines before the section
    for section in re.split(r"(?m)^(?=diff --git )", text):
        summary = _vendored_summary(section, vendored) if section else None
        if summary is not None:
            files.append(summary)
        elif section:
            files.extend(_parse(section, offset))
        offset += section.count("\n")
    return files


def _vendored_summary(section: str, vendored: Callable[[str], bool]) -> Optional[FileDiff]:
    head_end = section.find("\n@@")
    head = section[:head_end] if head_end >= 0 else section
    match = re.search(r"(?m)^\+\+\+ (?:b/)?(.+)$", head)
    if match is None or "\nnew file mode" not in head or not vendored(match.group(1)):
        return None
    return FileDiff(match.group(1), new_file=True, vendored_lines=section.count("\n+") - 1)


def _parse(section: str, offset: int) -> List[FileDiff]:
    """One file's part of the patch (``offset``: the lines before it, for the line numbers of errors)."""
    files: List[FileDiff] = []
    hunk: Optional[Hunk] = None
    old = new = 0
    lines = section.split("\n")
    if lines[-1] == "":
        lines.pop()  # the section's final newline
    for number, line in enumerate(lines, offset + 1):
        if line.startswith("diff --git "):
            files.append(FileDiff(path=""))
            hunk = None
        elif not files:
            if line:
                raise PatchError(f"line {number}: expected 'diff --git', got {line[:40]!r}")
        elif hunk is None and line.startswith("new file mode"):
            files[-1].new_file = True
        elif hunk is None and line.startswith("+++ "):
            files[-1].path = line[4:][2:] if line[4:].startswith("b/") else line[4:]
        elif hunk is None and (line.startswith("--- ") or line.startswith("index ")):
            continue
        elif line.startswith("@@"):
            match = HUNK_HEADER.match(line)
            if not match:
                raise PatchError(f"line {number}: malformed hunk header {line!r}")
            a, b, c, d = match.groups()
            hunk = Hunk(int(a), int(b if b is not None else 1), int(c), int(d if d is not None else 1))
            files[-1].hunks.append(hunk)
            old, new = hunk.old_start if hunk.old_count else hunk.old_start + 1, hunk.new_start if hunk.new_count else 1
        elif hunk is not None and line.startswith("\\"):
            if hunk.lines:
                hunk.lines[-1].newline = False
        elif hunk is not None and line[:1] in (" ", "-", "+"):
            kind = line[0]
            hunk.lines.append(DiffLine(kind, line[1:], old if kind != "+" else None, new if kind != "-" else None))
            old += kind != "+"
            new += kind != "-"
        else:
            raise PatchError(f"line {number}: unexpected line in a diff: {line[:40]!r}")
    return files
