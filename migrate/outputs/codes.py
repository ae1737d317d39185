"""Every diagnostic code as the reports describe it: name, one-line summary, doc page, default level.

Read only from the code declarations (``code_catalogue.declarations()``: each rule's
``DiagnosticCode``s and the tool's ``TOOL_CODES``) and, for the longer description, the doc pages
``migrate/docs/NPUxxx.md``. A code without a declaration of its own is not in the catalogue: there is
no fallback to another code's summary or to a page heading (the headings are generated from the
declarations, ``migrate.outputs.doc_pages``). report.md, report.sarif, report.html,
``--statistics`` and ``migrate explain`` all read this one catalogue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Optional

from .. import catalogue as code_catalogue, diagnostics

ERROR, WARNING, NOTE = "error", "warning", "note"  # SARIF levels


@dataclass(frozen=True)
class CodeInfo:
    code: str
    name: str  # PascalCase, e.g. "RmsNorm" (SARIF's reportingDescriptor.name)
    summary: str
    page: Optional[str]  # the doc page (Markdown), None when the code has none
    rewrites: bool  # the code names a rewrite (its sites are changed), else a report

    @property
    def level(self) -> str:
        """The default SARIF level: tool errors, reported problems, or rewrites (notes)."""
        if self.code in diagnostics.TOOL_CODES:
            return ERROR
        return NOTE if self.rewrites else WARNING

    @property
    def description(self) -> str:
        """The first paragraph of the page's "What it does" section (the summary without a page)."""
        section = section_of(self.page or "", "What it does")
        return " ".join(section.split("\n\n")[0].split()) if section else self.summary


def section_of(page: str, title: str) -> Optional[str]:
    """The text of a page's ``## title`` section (None when the page has none)."""
    match = re.search(rf"^## {re.escape(title)}\s*\n(.*?)(?=^## |\Z)", page, re.M | re.S)
    return match.group(1).strip() if match else None


def pascal(text: str) -> str:
    return "".join(part[:1].upper() + part[1:].lower() for part in re.split(r"[^A-Za-z0-9]+", text) if part)


def catalogue() -> Dict[str, CodeInfo]:
    """Every declared code, sorted."""
    return {code: CodeInfo(code, pascal(declared.name), declared.summary, diagnostics.doc_page(code),
                           declared.rewrites)
            for code, declared in code_catalogue.declarations().items()}
