"""Diagnostic codes: how a rule declares one (``DiagnosticCode``), the tool's own codes (NPU0xx)
and where each code's doc page lives. The catalogue of every code (the tool's, the rules', the
dependency files') is ``migrate.catalogue``, one floor above the rules."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional


@dataclass(frozen=True)
class DiagnosticCode:
    """The one declaration of a rule's code: everything else (listings, ``migrate explain``,
    report.md, SARIF rules, the doc page's heading and Example section) is generated from it.

    ``example`` names the fixture that exemplifies the code, ``fixtures/rules/<code>_<example>/``
    (its diagnostics.txt has the code); the op-table records a code reads are the records whose
    ``code:`` is this code, found in the table rather than listed here.
    """

    code: str  # NPUxxx
    name: str  # slug, e.g. "rms-norm-unfused" (PascalCase in SARIF)
    summary: str  # one line: what a site with this code is and what happens to it
    rewrites: bool = False  # its sites are rewritten (else reported)
    example: Optional[str] = None  # the fixture's stem: fixtures/<fixtures>/<code>_<example>/
    fixtures: str = "rules"  # the fixtures folder: "rules" (Python rules) or "files" (dependency and launcher files)
    # the doc page's prose (markdown ``## `` sections: What it does, Why, Fix safety), usually the rule
    # module's docstring; empty: the prose is the hand-written part of ``docs/<code>.md``
    doc: str = ""

    @property
    def example_dir(self) -> Optional[str]:
        return f"{self.code}_{self.example}" if self.example else None

PARSE_ERROR = "NPU001"  # the file is not valid Python
NOT_UTF8 = "NPU002"  # the file is not UTF-8 text
RULE_CRASH = "NPU003"  # a rule raised on this file; the file is left unchanged
OUTPUT_INVALID = "NPU004"  # the rewritten file did not parse again; the file is left unchanged
READ_ERROR = "NPU005"  # the file could not be read
NOT_APPLIED = "NPU006"  # a rewrite overlapped another one and was not applied; the site is reported
TOO_LARGE = "NPU007"  # the file is over the per-file size limit
TIMED_OUT = "NPU008"  # the file's migration ran past the per-file time budget
WORKER_DIED = "NPU009"  # the process migrating the file died (a crash in native code)
TOO_DEEP = "NPU010"  # nesting too deep (RecursionError) or out of memory on this file
HELPER_CONFLICT = "NPU011"  # the file's npu_glue.py is not the helper, or an edited copy without a name the file calls
BAD_NAME = "NPU012"  # the file's name cannot go into a patch or report (non-UTF-8 bytes, control characters)
WRITE_ERROR = "NPU013"  # the migrated or copied file could not be written
UNLISTABLE = "NPU014"  # a directory could not be listed
CHANGED_DURING_RUN = "NPU015"  # the file changed on disk while it was migrated; not written
HELPER_KEPT = "NPU018"  # an edited npu_glue.py is kept beside the files migrated with it (a warning)
DECLARATION_INVALID = "NPU017"  # a dependency or launcher file is not valid in its format (TOML, YAML, Python)
PATH_TOO_LONG = "NPU020"  # the path is longer than the system allows (PATH_MAX); not migrated or copied

TOOL_CODES: Dict[str, str] = {
    PARSE_ERROR: "file does not parse as Python",
    NOT_UTF8: "file is not UTF-8 text",
    RULE_CRASH: "a rule crashed on the file",
    OUTPUT_INVALID: "the migrated file would not parse; left unchanged",
    READ_ERROR: "file could not be read",
    NOT_APPLIED: "a rewrite was not applied: it overlaps another rewrite (the site is reported)",
    TOO_LARGE: "file is over the per-file size limit; not migrated",
    TIMED_OUT: "file ran past the per-file time budget; not migrated",
    WORKER_DIED: "the process migrating the file crashed; not migrated",
    TOO_DEEP: "nesting too deep or out of memory on the file; not migrated",
    HELPER_CONFLICT: "an npu_glue.py that is not the vendored helper, or an edited copy without a name the file "
                     "calls, is in the way; files needing it left unchanged",
    BAD_NAME: "file name has non-UTF-8 bytes or control characters; not migrated",
    WRITE_ERROR: "the output file could not be written",
    UNLISTABLE: "directory could not be listed; its files are not in the output",
    CHANGED_DURING_RUN: "file changed on disk during the run; not written",
    HELPER_KEPT: "an edited npu_glue.py is kept, not replaced by the helper this run would write",
    DECLARATION_INVALID: "dependency or launcher file does not parse in its format (TOML, YAML, Python); not migrated",
    PATH_TOO_LONG: "path longer than the system's limit (PATH_MAX); not migrated or copied",
}
FILE_ERRORS = frozenset({PARSE_ERROR, NOT_UTF8, RULE_CRASH, OUTPUT_INVALID, READ_ERROR, TOO_LARGE, TIMED_OUT,
                         WORKER_DIED, TOO_DEEP, HELPER_CONFLICT, BAD_NAME, WRITE_ERROR, UNLISTABLE,
                         CHANGED_DURING_RUN, DECLARATION_INVALID, PATH_TOO_LONG})  # whole files, not sites
WARNINGS = frozenset({HELPER_KEPT})  # about a file that was processed: shown beside the file errors

DOCS_DIR = Path(__file__).parent / "docs"


def tool_declarations() -> Dict[str, DiagnosticCode]:
    """The tool codes as declarations: ``TOOL_CODES``' summary, the constant's name (``PARSE_ERROR`` →
    ``parse-error``); none has an example fixture (the doc page's Example is written by hand)."""
    names = {value: name.lower().replace("_", "-") for name, value in globals().items()
             if name.isupper() and isinstance(value, str) and value in TOOL_CODES}
    return {code: DiagnosticCode(code, names[code], summary) for code, summary in TOOL_CODES.items()}


def doc_page(code: str) -> Optional[str]:
    path = DOCS_DIR / f"{code.upper()}.md"
    return path.read_text(encoding="utf-8") if path.is_file() else None


_stored: Optional[Dict[str, DiagnosticCode]] = None  # a copy kept by the result cache (``use_stored``)


def use_stored(declared: Optional[Dict[str, DiagnosticCode]]) -> None:
    """Have ``catalogue.declarations()`` answer from ``declared`` (the result cache's copy for this very
    tool, see ``Cache.declarations``) as long as the rules are not imported: a run whose results are
    all cached then never imports them (nor libcst). None forgets the copy."""
    global _stored
    _stored = declared


def stored() -> Optional[Dict[str, DiagnosticCode]]:
    """The copy given to ``use_stored`` (None: none)."""
    return _stored
