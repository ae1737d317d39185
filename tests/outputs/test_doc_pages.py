"""The doc pages' generated parts (heading, Example, Op-table records) match the declarations; a rule
code's prose is its declared doc (the rule module's docstring), a tool or file code's the hand-written
sections of its page; the README's code list is generated from the same declarations."""

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from npu_migrate.migrate import catalogue, diagnostics
from npu_migrate.migrate.diagnostics import DiagnosticCode
from npu_migrate.migrate.cli.app import app
from npu_migrate.migrate.outputs import doc_pages
from npu_migrate.migrate.outputs.codes import section_of
from tests.snippets import builtin_table

HAND_WRITTEN = ("What it does", "Why", "Fix safety", "Known problems")
PAGE = """# NPU777: an old heading

## What it does

Rewrites things.

## Why

Because.

## Example

    old hand-written example

## Fix safety

Safe.

## Known problems

None.
"""


@pytest.mark.slow
def test_every_page_on_disk_is_the_generated_one():
    stale = [path.name for path, (on_disk, wanted) in doc_pages.generated().items() if on_disk != wanted]
    assert not stale, f"doc pages out of date with the code declarations: {stale}; run `{doc_pages.COMMAND}`"


@pytest.mark.slow
def test_the_check_command_names_the_stale_page_and_the_fix(tmp_path, capsys):
    docs = tmp_path / "docs"
    docs.mkdir()
    for page in diagnostics.DOCS_DIR.glob("*.md"):
        (docs / page.name).write_text(page.read_text(encoding="utf-8"), encoding="utf-8")
    (docs / "NPU321.md").write_text((docs / "NPU321.md").read_text().replace("# NPU321: ", "# NPU321: stale "))
    readme = tmp_path / "README.md"
    readme.write_text(doc_pages.README.read_text(encoding="utf-8").replace("| NPU101 |", "| NPU101 | stale"))
    assert doc_pages.main([], docs, readme) == 1
    err = capsys.readouterr().err
    assert "NPU321.md" in err and "README.md" in err and doc_pages.COMMAND in err and "NPU320.md" not in err
    assert doc_pages.main(["--write"], docs, readme) == 0 and doc_pages.main([], docs, readme) == 0
    assert (docs / "NPU321.md").read_text() == diagnostics.doc_page("NPU321")
    assert readme.read_text() == doc_pages.README.read_text(encoding="utf-8")


def test_headings_are_the_declared_summaries_and_report_codes_have_their_own():
    declared = catalogue.declarations()
    for code, d in declared.items():
        assert diagnostics.doc_page(code).splitlines()[0] == f"# {code}: {d.summary}"
    for fused, report in (("NPU320", "NPU321"), ("NPU330", "NPU331"), ("NPU340", "NPU341"), ("NPU310", "NPU311"),
                          ("NPU302", "NPU303")):
        assert diagnostics.doc_page(fused).splitlines()[0][8:] != diagnostics.doc_page(report).splitlines()[0][8:]


def _fixture(root: Path, name: str, source: str, diagnostics_txt: str, expected: str = None) -> Path:
    case = root / name
    case.mkdir(parents=True)
    (case / "input.py").write_text(source)
    (case / "diagnostics.txt").write_text(diagnostics_txt)
    if expected is not None:
        (case / "expected.py").write_text(expected)
    return case


def test_render_replaces_the_generated_parts_and_keeps_the_hand_written_ones(tmp_path):
    source = "import torch\n\n\ndef f(x):\n    y = x.cuda()\n    return y\n"
    expected = "import torch\nimport torch_npu  # noqa: F401\n\n\ndef f(x):\n    y = x.npu()\n    return y\n"
    _fixture(tmp_path, "NPU777_demo", source, "5:8 NPU777 .cuda() → .npu()\n", expected)
    declared = DiagnosticCode("NPU777", "demo", "a new summary", rewrites=True, example="demo")
    page = doc_pages.render(PAGE, declared, ("Tensor.cuda",), fixtures=tmp_path)
    assert page.startswith("# NPU777: a new summary\n")
    for title in HAND_WRITTEN:
        assert section_of(page, title) == section_of(PAGE, title), title
    example = section_of(page, "Example")
    assert "old hand-written example" not in example
    # the import-only hunk is skipped: the first hunk that changes code is shown, dedented
    assert "```python\ndef f(x):\n    y = x.cuda()\n    return y\n```" in example
    assert "```python\ndef f(x):\n    y = x.npu()\n    return y\n```" in example
    assert "`5:8 NPU777 .cuda() → .npu()`" in example
    assert section_of(page, "Op-table records") == "`Tensor.cuda`"
    assert page.index("## Example") < page.index("## Op-table records") < page.index("## Fix safety")
    assert doc_pages.render(page, declared, ("Tensor.cuda",), fixtures=tmp_path) == page  # a fixed point


def test_a_report_example_shows_the_lines_at_the_finding_and_its_message(tmp_path):
    source = "import torch\n\n\nclass M:\n    def forward(self, x):\n        return x.double()\n"
    _fixture(tmp_path, "NPU777_report", source, "6:15 NPU777 .double(): `float64` has no NPU kernels\n")
    declared = DiagnosticCode("NPU777", "demo", "summary", example="report")
    example = doc_pages.example_section(declared, fixtures=tmp_path)
    assert "```python\ndef forward(self, x):\n    return x.double()\n```" in example
    assert example.endswith("is reported: `` 6:15 NPU777 .double(): `float64` has no NPU kernels ``")


def test_an_example_without_the_code_is_an_error(tmp_path):
    _fixture(tmp_path, "NPU777_other", "x = 1\n", "1:0 NPU778 something else\n")
    with pytest.raises(ValueError, match="NPU777"):
        doc_pages.example_section(DiagnosticCode("NPU777", "demo", "summary", example="other"), fixtures=tmp_path)


def test_a_tool_code_page_keeps_its_hand_written_example():
    page = diagnostics.doc_page("NPU001")
    assert doc_pages.render(page, diagnostics.tool_declarations()["NPU001"]) == page
    assert "## Op-table records" not in page and 'print "hello"' in section_of(page, "Example")


def test_op_table_keys_are_the_records_with_the_code():
    table = builtin_table()
    keys = doc_pages.op_table_keys(table)
    for code in ("NPU201", "NPU321", "NPU303", "NPU108"):
        assert set(keys[code]) == {r.api for r in table.records() if r.code == code}, code
    assert "pattern.rms_norm.unrecognised" in keys["NPU321"]  # the residual pass's record
    page = diagnostics.doc_page("NPU321")
    assert section_of(page, "Op-table records") == ", ".join(f"`{k}`" for k in keys["NPU321"])


DOC = """NPU777/NPU778: two codes of one module.

# NPU777
## What it does
Rewrites things.

## Why
Because.

## Fix safety
Safe.

## Known problems
None.

# NPU778
## What it does
Reports the others.
## Why
They differ.
## Fix safety
Nothing is changed.
## Known problems
Some.
"""


def test_a_declared_doc_is_the_whole_prose_one_part_per_code_with_a_blank_line_under_each_heading(tmp_path):
    seventy_eight = doc_pages.render("", DiagnosticCode("NPU778", "other", "the other code", doc=DOC))
    assert seventy_eight == ("# NPU778: the other code\n\n## What it does\n\nReports the others.\n## Why\n\n"
                             "They differ.\n## Fix safety\n\nNothing is changed.\n## Known problems\n\nSome.\n")
    seventy_seven = doc_pages.render(PAGE, DiagnosticCode("NPU777", "demo", "a new summary", doc=DOC))
    assert section_of(seventy_seven, "What it does") == "Rewrites things." and "Reports the others" not in seventy_seven
    assert "old hand-written example" not in seventy_seven and "two codes of one module" not in seventy_seven


@pytest.mark.parametrize("doc, problem", [
    (DOC.replace("# NPU778", "# NPU779"), "has parts for NPU777, NPU779 but no '# NPU778' line"),
    (DOC.replace("## Why\nThey differ.\n", ""), "needs the '## ' sections What it does, Why, Fix safety, Known problems"),
    ("NPU778: no sections at all", "(it has: none)"),
])
def test_a_declared_doc_without_the_code_or_its_sections_is_an_error(doc, problem):
    with pytest.raises(ValueError, match=re.escape(problem)):
        doc_pages.prose(doc, "NPU778")


def test_every_rule_code_declares_its_doc_and_only_tool_and_file_codes_have_hand_written_pages():
    hand_written = doc_pages.hand_written_codes()
    assert set(diagnostics.TOOL_CODES) <= hand_written and "NPU130" in hand_written
    for code, declared in catalogue.declarations().items():
        assert bool(declared.doc) != (code in hand_written), code
        if declared.doc:  # the page says what the doc says, and nothing hand-written survives beside it
            assert diagnostics.doc_page(code).split("\n", 1)[1].startswith("\n" + doc_pages.prose(declared.doc, code)[:40])


def test_a_rule_code_without_a_doc_is_refused(monkeypatch):
    monkeypatch.setattr(catalogue, "declarations", lambda: {"NPU777": DiagnosticCode("NPU777", "demo", "summary")})
    with pytest.raises(ValueError, match="NPU777 declares no doc"):
        doc_pages.generated()


def test_the_readme_block_lists_every_code_and_shows_what_explain_prints():
    readme = doc_pages.README.read_text(encoding="utf-8")
    block = readme[readme.index(doc_pages.README_BEGIN):readme.index(doc_pages.README_END)]
    for code, declared in catalogue.declarations().items():
        summary = declared.summary.replace("|", "\\|")  # a pipe in a table cell is escaped
        assert f"\n| {code} | {summary} |\n" in block, code
    explained = CliRunner().invoke(app, ["explain", doc_pages.EXPLAINED]).output
    shown = "\n".join(explained.splitlines()[:doc_pages.EXPLAINED_LINES])
    assert f"$ migrate explain {doc_pages.EXPLAINED} | head -{doc_pages.EXPLAINED_LINES}\n{shown}\n```" in block
    with pytest.raises(ValueError, match="no '<!-- the code list"):
        doc_pages.render_readme("# a README without the markers\n", block)
    assert doc_pages.render_readme(f"a\n{doc_pages.README_BEGIN}\nold\n{doc_pages.README_END}\nb\n", "new") == "a\nnew\nb\n"
