"""The doc pages ``migrate/docs/NPUxxx.md`` and the README's code list, generated from the code
declarations: each code's story is told once.

- A rule's code (NPU1xx-NPU4xx, ``migrate/rules/<family>/``) declares its ``doc``: the rule module's
  docstring, whose ``## `` sections (``HEADINGS``: What it does, Why, Fix safety, Known problems) are
  the page's prose; a docstring that documents several codes has one part per code, under a line
  ``# NPUxxx``. Its page is wholly generated; a rule code without a doc is an error.
- The tool's own codes (NPU0xx, ``diagnostics.TOOL_CODES``) and the dependency and launcher files'
  (``files.codes``) have no rule module to hold their story: the hand-written sections of their page
  are its one source, kept as they are (a tool code's Example is hand-written too: no fixture).
- Generated on every page: the heading ``# CODE: summary``, and for a code with an example fixture
  the ``## Example`` section (a rewrite's first changed hunk of ``input.py`` → ``expected.py`` as
  before/after, a report's input lines at the finding and its message; a dependency or launcher
  file's from ``fixtures/files/<CODE>_<slug>/``, in the file's own language) and the ``## Op-table
  records`` section (the records whose ``code:`` is the code: op records, package, index and
  environment records).
- README.md: the block between ``README_BEGIN`` and ``README_END``, ``migrate explain``'s first lines
  for one code and the table of every code with its summary. ``migrate explain`` prints the pages and
  lists the catalogue, so the CLI, the pages and the README say the same.

The pages are package data and the installed tool has no fixtures, so this is a dev-time step:
``python -m npu_migrate.migrate.outputs.doc_pages --write`` rewrites the pages and the README block
in place, ``--check`` (the default) lists those that differ; tests/outputs/test_doc_pages.py fails
on them.
"""

from __future__ import annotations

import difflib
import re
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Sequence, Set, Tuple

from .. import catalogue, diagnostics
from ..diagnostics import DiagnosticCode
from ..files.codes import DECLARATIONS
from ..helpers import BESIDE, HELPER

ROOT = Path(__file__).resolve().parents[2]  # the source checkout
FIXTURES, README = ROOT / "fixtures" / "rules", ROOT / "README.md"
COMMAND = "python -m npu_migrate.migrate.outputs.doc_pages --write"
README_BEGIN = f"<!-- the code list: generated from the code declarations by `{COMMAND}` -->"
README_END = "<!-- end of the code list -->"
EXPLAINED, EXPLAINED_LINES = "NPU302", 5  # the README shows the first lines of this code's page
CONTEXT = 1  # unchanged lines around a hunk
REPORT_BEFORE, REPORT_AFTER = 3, 3  # at most this many lines around a reported finding
EXAMPLE, RECORDS, AFTER_EXAMPLE = "Example", "Op-table records", "Fix safety"
HEADINGS = ("What it does", "Why", "Fix safety", "Known problems")  # the written sections of every page
PART = re.compile(r"^# (NPU\d{3})[ \t]*$", re.M)  # a docstring's part for one of the codes it documents
HEADING = re.compile(r"^(## .*)\n(?=\S)", re.M)  # a section heading with its text on the next line


def op_table_keys(table=None) -> Dict[str, Tuple[str, ...]]:
    """code → the api keys of the op-table records whose ``code:`` it is (residual.yaml's too)."""
    from ...opmap import load_table

    table = table or load_table()
    keys: Dict[str, List[str]] = {}
    for record in table.records():
        if record.code:
            keys.setdefault(record.code, []).append(record.api)
    for package in table.packages():
        if package.code:
            local = f"+{package.local}" if package.local else ""
            keys.setdefault(package.code, []).append(f"package:{package.package}{local}")
    for index in table.indexes():
        keys.setdefault(index.code, []).append(f"index:{index.index}")
    for env in table.environment_records():
        keys.setdefault(env.code, []).append(f"{env.kind}:{env.name}" + (f"={env.value}" if env.value else ""))
    return {code: tuple(sorted(set(apis))) for code, apis in keys.items()}


def _inline(text: str) -> str:
    """Markdown inline code for ``text``, which may hold backticks itself."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _block(lines: Sequence[str], language: str = "python") -> str:
    return f"```{language}\n" + "\n".join(lines) + "\n```"


def _dedented(*groups: Sequence[str]) -> List[List[str]]:
    """The groups of lines, each dedented by the indent common to all of them."""
    joined = textwrap.dedent("\n".join("\n".join(g) for g in groups if g))
    out, at = [], joined.split("\n")
    for group in groups:
        out.append(at[:len(group)] if group else [])
        at = at[len(group):] if group else at
    return out


def _finding(example: Path, code: str) -> Tuple[int, str]:
    """The first line of the example's diagnostics.txt with ``code``: its line number and the line."""
    for line in (example / "diagnostics.txt").read_text(encoding="utf-8").splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) >= 2 and parts[1] == code:
            return int(parts[0].split(":")[0]), line.strip()
    raise ValueError(f"{example}/diagnostics.txt has no {code} finding (the declared example must show the code)")


def _only_imports(group, before: List[str], after: List[str]) -> bool:
    changed = [line for tag, i1, i2, j1, j2 in group if tag != "equal" for line in (*before[i1:i2], *after[j1:j2])]
    helper_import = BESIDE.format(HELPER).splitlines()
    return all(not line.strip() or line.startswith(("import ", "from ")) or line in helper_import for line in changed)


def _first_hunk(before: List[str], after: List[str]) -> Tuple[List[str], List[str]]:
    """The first hunk (with context) that changes more than the imports (else the first hunk)."""
    groups = list(difflib.SequenceMatcher(None, before, after, autojunk=False).get_grouped_opcodes(CONTEXT))
    if not groups:
        raise ValueError("the example's expected.py equals its input.py")
    group = next((g for g in groups if not _only_imports(g, before, after)), groups[0])
    return before[group[0][1]:group[-1][2]], after[group[0][3]:group[-1][4]]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _around(source: List[str], line: int) -> List[str]:
    """The lines shown for a finding on ``line`` (1-based): back to the enclosing header (the nearest
    line indented less, at most ``REPORT_BEFORE`` lines up), the line, and the lines nested under it."""
    at = line - 1
    start = at
    while start > max(0, at - REPORT_BEFORE) and (not source[start - 1].strip()
                                                  or _indent(source[start - 1]) >= _indent(source[at])):
        start -= 1
    if start > 0 and _indent(source[start - 1]) < _indent(source[at]):
        start -= 1
    end = at + 1
    while end < min(len(source), at + 1 + REPORT_AFTER) and source[end].strip() \
            and _indent(source[end]) > _indent(source[at]):
        end += 1
    shown = source[start:end]
    while shown and not shown[0].strip():
        shown = shown[1:]
    return shown


def _file_finding(example: Path, code: str) -> Tuple[str, int, str]:
    """The first finding of ``code`` in a file fixture's diagnostics.txt: (path, line, the line)."""
    for line in (example / "diagnostics.txt").read_text(encoding="utf-8").splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) >= 2 and parts[1] == code:
            path, number = parts[0].split(":")[:2]
            return path, int(number), line.strip()
    raise ValueError(f"{example}/diagnostics.txt has no {code} finding (the declared example must show the code)")


def file_example_section(declared: DiagnosticCode, fixtures: Path) -> str:
    """The ``## Example`` of a dependency or launcher file's code (``fixtures/files/<CODE>_<slug>/``)."""
    from ..files.kinds import kind_of

    example = fixtures / declared.example_dir
    path, line, finding = _file_finding(example, declared.code)
    kind = kind_of(path)
    language = kind.language if kind is not None else "python"
    source = (example / "input" / path).read_text(encoding="utf-8").splitlines()
    where = f"`fixtures/{declared.fixtures}/{declared.example_dir}` (`{path}`)"
    if declared.rewrites:
        expected = (example / "expected" / path).read_text(encoding="utf-8").splitlines()
        old, new = _dedented(*_first_hunk(source, expected))
        return (f"From {where}, the first change. Before:\n\n{_block(old, language)}\n\nAfter:\n\n"
                f"{_block(new, language)}\n\nThe finding: {_inline(finding)}")
    (shown,) = _dedented(_around(source, line))
    return f"From {where}:\n\n{_block(shown, language)}\n\nis reported: {_inline(finding)}"


def example_section(declared: DiagnosticCode, fixtures: Path = FIXTURES) -> str:
    """The ``## Example`` section's text for a rule code, from its declared example fixture."""
    if declared.fixtures != FIXTURES.name:
        return file_example_section(declared, fixtures.parent / declared.fixtures)
    example = fixtures / declared.example_dir
    source = (example / "input.py").read_text(encoding="utf-8").splitlines()
    line, finding = _finding(example, declared.code)
    where = f"`fixtures/rules/{declared.example_dir}`"
    if declared.rewrites:
        expected = (example / "expected.py").read_text(encoding="utf-8").splitlines()
        old, new = _dedented(*_first_hunk(source, expected))
        return (f"From {where}, the first change. Before:\n\n{_block(old)}\n\nAfter:\n\n{_block(new)}\n\n"
                f"The finding: {_inline(finding)}")
    (shown,) = _dedented(_around(source, line))
    return f"From {where}:\n\n{_block(shown)}\n\nis reported: {_inline(finding)}"


def records_section(keys: Sequence[str]) -> str:
    if not keys:
        return "None: this code reads no op-table record."
    return ", ".join(f"`{key}`" for key in keys)


def _set_section(page: str, title: str, body: str, before: str) -> str:
    """``page`` with section ``title``'s text replaced by ``body`` (inserted before section ``before``
    when the page has none)."""
    text = f"## {title}\n\n{body}\n\n"
    match = re.search(rf"^## {re.escape(title)}[ \t]*\n.*?(?=^## |\Z)", page, re.M | re.S)
    if match:
        return page[:match.start()] + text + page[match.end():]
    anchor = re.search(rf"^## {re.escape(before)}[ \t]*$", page, re.M)
    if anchor is None:
        raise ValueError(f"the page has no '## {before}' section to put '## {title}' before")
    return page[:anchor.start()] + text + page[anchor.start():]


def prose(doc: str, code: str) -> str:
    """The ``## `` sections of ``code``'s declared ``doc`` (a rule module's docstring: its summary line
    and whatever precedes the first section are for readers of the code). A docstring that documents
    several codes has one part per code, each under a line ``# NPUxxx``; every code's prose has the
    sections every page has (``HEADINGS``), in that order."""
    parts = {match.group(1): match for match in PART.finditer(doc)}
    if parts:
        if code not in parts:
            raise ValueError(f"the doc declared for {code} has parts for {', '.join(parts)} but no '# {code}' line")
        end = next((m.start() for m in PART.finditer(doc, parts[code].end())), len(doc))
        doc = doc[parts[code].end():end]
    at = re.search(r"^## ", doc, re.M)
    titles = [title.strip() for title in re.findall(r"^## (.*)$", doc, re.M)]
    if at is None or [t for t in titles if t in HEADINGS] != list(HEADINGS):
        raise ValueError(f"the doc declared for {code} needs the '## ' sections {', '.join(HEADINGS)} in this order "
                         f"(it has: {', '.join(titles) or 'none'})")
    return HEADING.sub(r"\1\n\n", doc[at.start():].strip("\n") + "\n")  # a blank line under each heading


def render(page: str, declared: DiagnosticCode, keys: Sequence[str] = (), fixtures: Path = FIXTURES) -> str:
    """``page`` with its generated parts made from ``declared`` (the hand-written sections kept; a
    code that declares its ``doc`` has no hand-written part: the page is made from it)."""
    _, _, rest = page.partition("\n")
    if declared.doc:
        rest = "\n" + prose(declared.doc, declared.code)
    page = f"# {declared.code}: {declared.summary}\n{rest}"
    if declared.example:
        page = _set_section(page, EXAMPLE, example_section(declared, fixtures), AFTER_EXAMPLE)
        page = _set_section(page, RECORDS, records_section(keys), AFTER_EXAMPLE)
    return page.rstrip("\n") + "\n"


def readme_block(declarations: Dict[str, DiagnosticCode], pages: Dict[str, str]) -> str:
    """The README's generated block: ``migrate explain``'s first lines for ``EXPLAINED`` (its page as
    a pipe prints it) and the table of every code with its summary."""
    shown = pages[EXPLAINED].splitlines()[:EXPLAINED_LINES]
    rows = [f"| {code} | {declared.summary.replace('|', chr(92) + '|')} |" for code, declared in declarations.items()]
    return "\n".join([README_BEGIN, "", "```", f"$ migrate explain {EXPLAINED} | head -{EXPLAINED_LINES}", *shown,
                      "```", "", "| code | summary |", "|---|---|", *rows, "", README_END])


def render_readme(readme: str, block: str) -> str:
    """``readme`` with the text between its markers (``README_BEGIN`` … ``README_END``) made ``block``."""
    start, end = readme.find(README_BEGIN), readme.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"README.md has no '{README_BEGIN}' ... '{README_END}' block for the code list")
    return readme[:start] + block + readme[end + len(README_END):]


def hand_written_codes() -> Set[str]:
    """The codes whose page is the one hand-written source of their prose: the tool's own codes and
    the dependency and launcher files' (no rule module holds their story). Every rule code declares
    its ``doc``."""
    return set(diagnostics.TOOL_CODES) | {declared.code for declared in DECLARATIONS}


def generated(docs: Path = diagnostics.DOCS_DIR, fixtures: Path = FIXTURES,
              readme: Path = README) -> Dict[Path, Tuple[str, str]]:
    """Every code's page and the README: path → (text on disk, text generated from the declarations)."""
    if not fixtures.is_dir():
        raise FileNotFoundError(f"{fixtures}: the fixtures are in the source checkout, not the installed tool")
    keys = op_table_keys()
    declarations = catalogue.declarations()
    hand_written = hand_written_codes()
    pages, texts = {}, {}
    for code, declared in declarations.items():
        path = docs / f"{code}.md"
        if not declared.doc and code not in hand_written:
            raise ValueError(f"{code} declares no doc: a rule's code passes doc=__doc__ (its module's '## ' sections)")
        if not path.is_file() and not declared.doc:
            raise FileNotFoundError(f"{path}: {code} has no doc page (write its hand-written sections first)")
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        texts[code] = render(current, declared, keys.get(code, ()), fixtures)
        pages[path] = (current, texts[code])
    current = readme.read_text(encoding="utf-8")
    pages[readme] = (current, render_readme(current, readme_block(declarations, texts)))
    return pages


def main(argv: Sequence[str] = (), docs: Path = diagnostics.DOCS_DIR, readme: Path = README) -> int:
    write = "--write" in argv
    stale = [(path, new) for path, (old, new) in generated(docs, readme=readme).items() if old != new]
    for path, new in stale:
        if write:
            path.write_text(new, encoding="utf-8")
        sys.stderr.write(f"{'rewrote' if write else 'out of date'}: {path}\n")
    if stale and not write:
        sys.stderr.write(f"run `{COMMAND}`\n")
    return 1 if stale and not write else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
