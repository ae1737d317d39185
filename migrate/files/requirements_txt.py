"""pip requirements files (``requirements*.txt``, ``*-requirements.txt``, ``requirements/*.txt``,
constraints files, pip-tools ``.in`` files, and any file another one includes with ``-r``/``-c``):
every requirement goes through the package table, every ``--index-url`` / ``--extra-index-url`` /
``--find-links`` through the index table, and an exact torch pin gains its torch-npu line right below
it (with the same environment marker) where the code imports torch_npu.

Lines are pip's logical lines: a backslash at the end joins the next line; ``#`` at the start or
after whitespace starts a comment; options after a requirement (``--hash=...``) belong to it.
"""

from __future__ import annotations

import re
from typing import Iterator, List, Tuple

from npu_migrate.migrate.files.base import FileKind, Scan, TextEdit
from npu_migrate.migrate.files.declared import Declared, from_url, requirement as declaration
from npu_migrate.migrate.files.packages import check_index, check_packages

_NAME = re.compile(r"(?i)^(.*[-_.])?(requirements?|reqs?|constraints?)([-_.].*)?\.(txt|in)$")
_DIRS = ("requirements", "reqs")
_COMMENT = re.compile(r"(^|\s)#.*$")
_INDEX_OPTIONS = ("-i", "--index-url", "--extra-index-url", "-f", "--find-links")
_INCLUDE_OPTIONS = ("-r", "--requirement", "-c", "--constraint")
_OPTION = re.compile(r"^(?P<option>--?[A-Za-z-]+)(?:[= ]\s*(?P<value>\S+))?")
_TRAILING_OPTIONS = re.compile(r"\s--?[A-Za-z]")


def logical_lines(text: str) -> Iterator[Tuple[int, int, str]]:
    """(start offset, end offset past the newline, the joined line without comment) per logical line."""
    start, pieces, at = 0, [], 0
    for physical in text.splitlines(keepends=True):
        body = physical.rstrip("\r\n")
        if body.endswith("\\") and not _COMMENT.search(body[:-1]):
            pieces.append(body[:-1])
        else:
            pieces.append(body)
            yield start, at + len(physical), _COMMENT.sub("", "".join(pieces)).strip()
            pieces, start = [], at + len(physical)
        at += len(physical)
    if pieces:
        yield start, at, _COMMENT.sub("", "".join(pieces)).strip()


def includes(text: str) -> List[str]:
    """The files a requirements file includes (``-r``/``-c``), as written (relative to its directory)."""
    found = []
    for _, _, line in logical_lines(text):
        match = _OPTION.match(line)
        if match and match.group("option") in _INCLUDE_OPTIONS and match.group("value"):
            found.append(match.group("value"))
    return found


def _sibling(text: str, end: int):
    """Insert a requirement on its own line right after the logical line that ends at ``end``."""
    newline = "" if end > 0 and text[end - 1] == "\n" else "\n"
    return lambda requirement: TextEdit(end, end, f"{newline}{requirement}\n")


class Requirements(FileKind):
    name = "requirements"
    declares_packages = True

    def matches(self, path: str, head: bytes = b"") -> bool:
        parts = path.split("/")
        return bool(_NAME.match(parts[-1])) or (len(parts) > 1 and parts[-2].lower() in _DIRS
                                                and parts[-1].endswith((".txt", ".in")))

    def scan(self, scan: Scan) -> None:
        found: List[Declared] = []
        for start, end, line in logical_lines(scan.text):
            if not line:
                continue
            at = start + len(scan.text[start:end]) - len(scan.text[start:end].lstrip())
            if line.startswith("-"):
                match = _OPTION.match(line)
                if match and match.group("option") in _INDEX_OPTIONS and match.group("value"):
                    check_index(scan, match.group("value"), at)
                elif match and match.group("option") in ("-e", "--editable") and match.group("value"):
                    item = from_url(match.group("value"), at, "requirements")
                    if item is not None:
                        found.append(item)
                continue
            options = _TRAILING_OPTIONS.search(line)
            requirement = line[:options.start()] if options else line
            item = declaration(requirement, at, "requirements", _sibling(scan.text, end), hashed="--hash" in line)
            if item is not None:
                found.append(item)
        check_packages(scan, found)

