"""``# npu-migrate: ignore[NPU302]`` comments: keep a site as it is and record it as suppressed.

The comment goes on the line a finding points at (the line `migrate run` reports for it); a bare
``# npu-migrate: ignore`` keeps every site on that line, ``ignore[NPU302, NPU2]`` the sites whose
code matches one of the codes or prefixes. A suppressed site keeps its original code and is listed
with action ``suppressed``: it is neither rewritten nor counted as needing attention.

``# npu-migrate: ignore-file`` on a line of its own (anywhere in the file, as ruff's ``# ruff: noqa``)
keeps every site of the file as it is; ``# npu-migrate: ignore-file[NPU1]`` those of the codes given.
"""

from __future__ import annotations

import re
from typing import Dict, FrozenSet, Optional

MARKER = b"npu-migrate: ignore"
_COMMENT = re.compile(r"#\s*npu-migrate:\s*ignore(?!-)(?:\[(?P<codes>[^\]]*)\])?")
_FILE_COMMENT = re.compile(r"^\s*#\s*npu-migrate:\s*ignore-file(?:\[(?P<codes>[^\]]*)\])?\s*$", re.M)
ALL: FrozenSet[str] = frozenset()  # a bare ignore: every code


def suppressed_lines(source: str) -> Dict[int, FrozenSet[str]]:
    """``{line: codes}`` for each line holding a suppression comment (empty codes: all)."""
    if MARKER.decode() not in source:
        return {}
    found: Dict[int, FrozenSet[str]] = {}
    for number, line in enumerate(source.splitlines(), start=1):
        match = _COMMENT.search(line)
        if match is not None:
            codes = match.group("codes")
            found[number] = ALL if codes is None else frozenset(c.strip().upper() for c in codes.split(",") if c.strip())
    return found


def ignored_file(source: str) -> Optional[FrozenSet[str]]:
    """The codes ``# npu-migrate: ignore-file[...]`` keeps as they are in the whole file (empty: all),
    or None when the file has no such comment."""
    if "ignore-file" not in source:
        return None
    found: Optional[FrozenSet[str]] = None
    for match in _FILE_COMMENT.finditer(source):
        codes = match.group("codes")
        if codes is None:
            return ALL
        found = (found or frozenset()) | frozenset(c.strip().upper() for c in codes.split(",") if c.strip())
    return found


def is_suppressed(lines: Dict[int, FrozenSet[str]], line: int, code: str) -> bool:
    codes: Optional[FrozenSet[str]] = lines.get(line)
    return codes is not None and (not codes or any(code.startswith(c) for c in codes))
