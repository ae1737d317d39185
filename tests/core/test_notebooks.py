"""Issue 21 item 5: Jupyter notebooks. Code cells are migrated like a file (imports resolve across
cells), magics and shell lines stay, outputs/metadata/layout are untouched and the result is valid
nbformat; findings are located by cell and line in every output; a notebook that cannot be migrated
is reported, never copied silently; a notebook-only repository fails --check."""

import json

import nbformat
import pytest

from npu_migrate.migrate import exitcodes
from tests import snippets
from tests.cli.conftest import invoke, write_tree


def notebook(*cells) -> str:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = list(cells)
    return nbformat.writes(nb)


TRAIN = notebook(
    nbformat.v4.new_markdown_cell("# Training on a GPU: `.cuda()` here is prose"),
    nbformat.v4.new_code_cell("%matplotlib inline\nimport torch\nimport torch.nn as nn"),
    nbformat.v4.new_code_cell("!pip install einops\nmodel = nn.Linear(4, 4).cuda()\nloss = model(torch.randn(2, 4)).double()",
                              execution_count=7,
                              outputs=[nbformat.v4.new_output("stream", text="tensor(1.0000e-05)\n")]),
    nbformat.v4.new_code_cell("%%bash\necho x.cuda()"),
    nbformat.v4.new_code_cell("%%time\nfor _ in range(2):\n    torch.cuda.synchronize()\n    !nvidia-smi"),
)


@pytest.mark.slow
def test_code_cells_are_migrated_and_the_rest_is_untouched():
    result = snippets.migrate(TRAIN, "train.ipynb", status="changed")
    nb = nbformat.reads(result.migrated, as_version=4)
    nbformat.validate(nb)
    before = nbformat.reads(TRAIN, as_version=4)
    sources = [c.source for c in nb.cells]
    assert sources[0] == before.cells[0].source  # markdown
    assert sources[1] == "%matplotlib inline\nimport torch\nimport torch.nn as nn\nimport torch_npu  # noqa: F401"
    assert sources[2] == "!pip install einops\nmodel = nn.Linear(4, 4).npu()\nloss = model(torch.randn(2, 4)).double()"
    assert sources[3] == "%%bash\necho x.cuda()"  # a cell magic whose body is not Python
    assert sources[4] == "%%time\nfor _ in range(2):\n    torch.npu.synchronize()\n    !nvidia-smi"
    for old, new in zip(before.cells, nb.cells):  # outputs, counts and metadata byte for byte
        assert {k: v for k, v in old.items() if k != "source"} == {k: v for k, v in new.items() if k != "source"}
    assert nb.metadata == before.metadata
    unchanged_text = [line for line in TRAIN.splitlines() if '"source"' not in line and "cuda" not in line
                      and "import torch.nn as nn" not in line]
    assert all(line in result.migrated.splitlines() for line in unchanged_text)  # the JSON's layout kept
    again = snippets.migrate(result.migrated, "train.ipynb", status="unchanged")
    assert not [f for f in again.findings if f.action == "rewritten"]


def test_findings_are_located_by_cell_and_line():
    result = snippets.migrate(TRAIN, "train.ipynb")
    where = {(f.code, f.cell, f.line, f.col) for f in result.findings}
    assert ("NPU203", 3, 2, 24) in where  # `.cuda()` in cell 3, line 2 (0-based column 24)
    assert ("NPU101", 3, 3, 7) in where
    assert ("NPU201", 5, 3, 4) in where


@pytest.mark.slow
def test_every_output_names_the_cell(tmp_path):
    repo = write_tree(tmp_path / "repo", {"train.ipynb": TRAIN})
    concise = invoke(repo, "--check", "--output-format", "concise")
    assert concise.exit_code == exitcodes.WOULD_CHANGE | exitcodes.UNSUPPORTED  # a notebook-only repo fails --check
    assert "train.ipynb:cell 3:3:8: NPU101" in concise.stdout
    findings = json.loads(invoke(repo, "--check", "--output-format", "json").stdout)
    double = next(f for f in findings if f["code"] == "NPU101")
    assert (double["cell"], double["line"], double["col"]) == (3, 3, 8)
    github = invoke(repo, "--check", "--output-format", "github").stdout
    assert "::warning file=train.ipynb,title=npu-migrate NPU101::cell 3, line 3, column 8:" in github
    sarif = json.loads(invoke(repo, "--check", "--output-format", "sarif").stdout)
    result = next(r for r in sarif["runs"][0]["results"] if r["ruleId"] == "NPU101")
    assert result["message"]["text"].startswith("cell 3, line 3, column 8:")
    assert result["properties"]["cell"] == 3 and "fixes" not in result
    invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r")
    assert "`train.ipynb:cell 3:3:8`" in (tmp_path / "r/report.md").read_text()
    report = json.loads((tmp_path / "r/report.json").read_text())
    assert report["new_dependencies"] == [{"module": "torch_npu", "files": ["train.ipynb"]}]
    nbformat.validate(nbformat.read(tmp_path / "out/train.ipynb", as_version=4))


@pytest.mark.slow
@pytest.mark.parametrize("text, problem", [
    ("{not json", "not valid JSON"),
    ('{"nbformat": 3, "worksheets": []}', "not an nbformat 4 notebook"),
    (notebook(nbformat.v4.new_code_cell("import torch\nx = torch.zeros(1).cuda(\n")), "does not parse"),
])
def test_a_notebook_that_cannot_be_migrated_is_reported_and_left_as_it_is(tmp_path, text, problem):
    repo = write_tree(tmp_path / "repo", {"bad.ipynb": text, "ok.py": "import torch\nx = torch.zeros(1).cuda()\n"})
    result = invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r")
    assert result.exit_code == exitcodes.FILE_ERRORS
    report = json.loads((tmp_path / "r/report.json").read_text())
    (entry,) = [f for f in report["files"] if f["path"] == "bad.ipynb"]
    assert entry["status"] == "error" and problem in entry["error"]
    assert (tmp_path / "out/bad.ipynb").read_text() == text


def test_a_cell_that_does_not_parse_is_named():
    text = notebook(nbformat.v4.new_code_cell("import torch"), nbformat.v4.new_code_cell("x = (\ny = torch.zeros(1).cuda()"))
    result = snippets.migrate(text, "nb.ipynb", status="error")
    assert result.error.startswith("nb.ipynb:cell 2:")


def test_a_percent_operator_on_a_continuation_line_is_python_not_a_magic():
    text = notebook(nbformat.v4.new_code_cell('import torch\nmsg = ("on %s"\n       % "cuda")\nx = torch.zeros(1).cuda()'))
    result = snippets.migrate(text, "nb.ipynb", status="changed")
    source = nbformat.reads(result.migrated, as_version=4).cells[0].source
    assert '       % "cuda")\nx = torch.zeros(1).npu()' in source
