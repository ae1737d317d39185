"""``# npu-migrate: ignore[NPU302]`` comments: keep a site as it is and record it as suppressed.

The comment goes on the line a finding points at (the line `migrate run` reports for it); a bare
``# npu-migrate: ignore`` keeps every site on that line, ``ignore[NPU302, NPU2]`` the sites whose
code matches one of the codes or prefixes. A suppressed site keeps its original code and is listed
with action ``suppressed``: it is neither rewritten nor counted as needing attention.
"""

from __future__ import annotations

import re
from typing import Dict, FrozenSet, Optional

MARKER = b"npu-migrate: ignore"
_COMMENT = re.compile(r"#\s*npu-migrate:\s*ignore(?:\[(?P<codes>[^\]]*)\])?")
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


def is_suppressed(lines: Dict[int, FrozenSet[str]], line: int, code: str) -> bool:
    codes: Optional[FrozenSet[str]] = lines.get(line)
    return codes is not None and (not codes or any(code.startswith(c) for c in codes))
