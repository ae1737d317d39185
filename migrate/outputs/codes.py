"""Every diagnostic code as the reports describe it: name, one-line summary, doc page, default level.

Read from the code declarations: the rule classes (``code``/``codes``, ``name``, ``summary`` and
per-code ``summaries``), the tool's own codes (``diagnostics.TOOL_CODES`` and their constants) and
the doc pages ``migrate/docs/NPUxxx.md``. A code's summary is the one its rule declares for it; a
further code of a rule without a declared summary of its own (NPU321 of the RMSNorm rule, say)
takes its doc page's heading, never the rule's rewrite summary. report.md, report.sarif,
report.html, ``--statistics`` and ``migrate explain`` all read this one catalogue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Optional

from npu_migrate.migrate import diagnostics

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
        section = _section(self.page or "", "What it does")
        return " ".join(section.split("\n\n")[0].split()) if section else self.summary


def _section(page: str, title: str) -> Optional[str]:
    match = re.search(rf"^## {re.escape(title)}\s*\n(.*?)(?=^## |\Z)", page, re.M | re.S)
    return match.group(1).strip() if match else None


def page_heading(page: Optional[str]) -> Optional[str]:
    """``# NPU321: text`` → ``text``."""
    match = re.match(r"#\s*NPU\d+\s*:\s*(.+)", page or "")
    return match.group(1).strip() if match else None


def pascal(text: str) -> str:
    return "".join(part[:1].upper() + part[1:].lower() for part in re.split(r"[^A-Za-z0-9]+", text) if part)


def _tool_names() -> Dict[str, str]:
    """NPU001 → ParseError: the names of diagnostics' code constants."""
    return {value: pascal(name) for name, value in vars(diagnostics).items()
            if name.isupper() and isinstance(value, str) and value in diagnostics.TOOL_CODES}


def catalogue() -> Dict[str, CodeInfo]:
    """Every known code, sorted (the rules are looked up at call time, so a test's stand-ins count)."""
    from npu_migrate.migrate import rules

    names = _tool_names()
    infos = {}
    for code, summary in diagnostics.TOOL_CODES.items():
        infos[code] = CodeInfo(code, names.get(code, code), summary, diagnostics.doc_page(code), rewrites=False)
    for rule in rules.all_rules():
        declared = dict(getattr(rule, "summaries", None) or {})
        declared.setdefault(rule.code, rule.summary)
        for code in rule.all_codes():
            page = diagnostics.doc_page(code)
            summary = declared.get(code) or page_heading(page) or rule.summary
            name = pascal(rule.name) + ("" if code == rule.code else code[3:])
            rewrites = code == rule.code and code[:4] in ("NPU2", "NPU3") and "→" in summary
            infos[code] = CodeInfo(code, name, summary, page, rewrites)
    return dict(sorted(infos.items()))
