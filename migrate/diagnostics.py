"""Diagnostic codes: how a rule declares one (``DiagnosticCode``), the tool's own codes (NPU0xx,
each declared once by ``_tool``) and where each code's doc page lives. The catalogue of every code (the tool's, the rules', the
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
    # the doc page's prose: a rule's module docstring (``## `` sections What it does, Why, Fix safety,
    # Known problems; one part per code under ``# NPUxxx`` when it documents several); empty for the
    # tool's and the files' codes, whose prose is the hand-written part of ``docs/<code>.md``
    doc: str = ""

    @property
    def example_dir(self) -> Optional[str]:
        return f"{self.code}_{self.example}" if self.example else None


TOOL_DECLARATIONS: Dict[str, DiagnosticCode] = {}  # the tool's own codes, filled by _tool below


def _tool(code: str, name: str, summary: str) -> str:
    """Declare one of the tool's codes (its page, ``docs/<code>.md``, is hand-written: no rule module
    holds its story) and return the code for the constant that names it."""
    TOOL_DECLARATIONS[code] = DiagnosticCode(code, name, summary)
    return code


PARSE_ERROR = _tool("NPU001", "parse-error", "file does not parse as Python")
NOT_UTF8 = _tool("NPU002", "not-utf8", "file is not UTF-8 text")
RULE_CRASH = _tool("NPU003", "rule-crash", "a rule crashed on the file")
OUTPUT_INVALID = _tool("NPU004", "output-invalid", "the migrated file would not parse; left unchanged")
READ_ERROR = _tool("NPU005", "read-error", "file could not be read")
NOT_APPLIED = _tool("NPU006", "not-applied",
                    "a rewrite was not applied: it overlaps another rewrite (the site is reported)")
TOO_LARGE = _tool("NPU007", "too-large", "file is over the per-file size limit; not migrated")
TIMED_OUT = _tool("NPU008", "timed-out", "file ran past the per-file time budget; not migrated")
WORKER_DIED = _tool("NPU009", "worker-died", "the process migrating the file crashed; not migrated")
TOO_DEEP = _tool("NPU010", "too-deep", "nesting too deep or out of memory on the file; not migrated")
HELPER_CONFLICT = _tool("NPU011", "helper-conflict",
                        "an npu_glue.py that is not the vendored helper, or an edited copy without a name the file "
                        "calls, is in the way; files needing it left unchanged")
BAD_NAME = _tool("NPU012", "bad-name", "file name has non-UTF-8 bytes or control characters; not migrated")
WRITE_ERROR = _tool("NPU013", "write-error", "the output file could not be written")
UNLISTABLE = _tool("NPU014", "unlistable", "directory could not be listed; its files are not in the output")
CHANGED_DURING_RUN = _tool("NPU015", "changed-during-run", "file changed on disk during the run; not written")
HELPER_KEPT = _tool("NPU018", "helper-kept",
                    "an edited npu_glue.py is kept, not replaced by the helper this run would write")
DECLARATION_INVALID = _tool("NPU017", "declaration-invalid",
                            "dependency or launcher file does not parse in its format (TOML, YAML, Python); not migrated")
PATH_TOO_LONG = _tool("NPU020", "path-too-long",
                      "path longer than the system's limit (PATH_MAX); not migrated or copied")
TOOL_CODES: Dict[str, str] = {code: declared.summary for code, declared in TOOL_DECLARATIONS.items()}
FILE_ERRORS = frozenset({PARSE_ERROR, NOT_UTF8, RULE_CRASH, OUTPUT_INVALID, READ_ERROR, TOO_LARGE, TIMED_OUT,
                         WORKER_DIED, TOO_DEEP, HELPER_CONFLICT, BAD_NAME, WRITE_ERROR, UNLISTABLE,
                         CHANGED_DURING_RUN, DECLARATION_INVALID, PATH_TOO_LONG})  # whole files, not sites
WARNINGS = frozenset({HELPER_KEPT})  # about a file that was processed: shown beside the file errors

DOCS_DIR = Path(__file__).parent / "docs"


def tool_declarations() -> Dict[str, DiagnosticCode]:
    """The tool codes' declarations (none has an example fixture: the page's Example is hand-written)."""
    return dict(TOOL_DECLARATIONS)


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
