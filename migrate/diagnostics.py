"""The tool's own diagnostic codes (NPU0xx) and where each code's doc page lives."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

PARSE_ERROR = "NPU001"  # the file is not valid Python
NOT_UTF8 = "NPU002"  # the file is not UTF-8 text
RULE_CRASH = "NPU003"  # a rule raised on this file; the file is left unchanged
OUTPUT_INVALID = "NPU004"  # the rewritten file did not parse again; the file is left unchanged
READ_ERROR = "NPU005"  # the file could not be read
NOT_APPLIED = "NPU006"  # a rewrite overlapped another one and was not applied; the site is reported

TOOL_CODES: Dict[str, str] = {
    PARSE_ERROR: "file does not parse as Python",
    NOT_UTF8: "file is not UTF-8 text",
    RULE_CRASH: "a rule crashed on the file",
    OUTPUT_INVALID: "the migrated file would not parse; left unchanged",
    READ_ERROR: "file could not be read",
    NOT_APPLIED: "a rewrite was not applied: it overlaps another rewrite (the site is reported)",
}
FILE_ERRORS = frozenset({PARSE_ERROR, NOT_UTF8, RULE_CRASH, OUTPUT_INVALID, READ_ERROR})  # whole files, not sites

DOCS_DIR = Path(__file__).parent / "docs"


def doc_page(code: str) -> Optional[str]:
    path = DOCS_DIR / f"{code.upper()}.md"
    return path.read_text(encoding="utf-8") if path.is_file() else None


def all_codes() -> Dict[str, str]:
    """Every diagnostic code with its one-line summary (tool codes and rule codes)."""
    from npu_migrate.migrate.rules import all_rules

    codes = dict(TOOL_CODES)
    for rule in all_rules():
        for code in rule.all_codes():
            codes[code] = getattr(rule, "summaries", {}).get(code, rule.summary)
    return dict(sorted(codes.items()))
