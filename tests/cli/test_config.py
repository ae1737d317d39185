"""Issue 21 item 2: ``[tool.npu-migrate]`` in pyproject.toml. The nearest table is read; select,
ignore, exclude, per-file-ignores and opmap apply; the command line wins or adds; a mistake is an
error naming file:line (a typo never turns a gate off silently)."""

import json

import pytest

from npu_migrate.migrate import exitcodes
from tests.cli.conftest import fake_rules, invoke, write_tree  # noqa: F401  (fixture)

CUDA = "import torch\n\nx = torch.zeros(3).cuda()\n"
DOUBLE = "import torch\n\ny = torch.zeros(3).double()\n"


@pytest.fixture
def repo(tmp_path, fake_rules):
    return write_tree(tmp_path / "repo", {"train.py": CUDA, "model/layers.py": DOUBLE, "tests/t.py": DOUBLE,
                                          "third_party/x.py": CUDA})


def findings(result) -> list:
    return [(f["path"], f["code"]) for f in json.loads(result.stdout)]


@pytest.mark.slow
def test_the_table_applies(repo):
    write_tree(repo, {"pyproject.toml": '[project]\nname = "x"\n\n[tool.npu-migrate]\nexclude = ["third_party/"]\n'
                                        '\n[tool.npu-migrate.per-file-ignores]\n"tests/*" = ["NPU902"]\n'})
    result = invoke(repo, "--check", "--output-format", "json")
    assert sorted(findings(result)) == [("model/layers.py", "NPU902"), ("train.py", "NPU901")]
    assert sorted(findings(invoke(repo / "model", "--check", "--output-format", "json"))) == [("layers.py", "NPU902")]


@pytest.mark.slow
def test_the_command_line_replaces_select_and_adds_to_ignore(repo):
    write_tree(repo, {"pyproject.toml": '[tool.npu-migrate]\nselect = ["NPU902"]\nignore = ["NPU901"]\n'})
    assert {c for _, c in findings(invoke(repo, "--check", "--output-format", "json"))} == {"NPU902"}
    assert findings(invoke(repo, "--check", "--output-format", "json", "--select", "NPU901")) == []  # still ignored
    assert {c for _, c in findings(invoke(repo, "--check", "--output-format", "json", "--isolated"))} == \
        {"NPU901", "NPU902"}


@pytest.mark.parametrize("table, line, problem", [
    ('[tool.npu-migrate]\nselect = ["NPU90"]\nexclud = ["x"]\n', 3, "unknown key 'exclud'"),
    ('[tool.npu-migrate]\n\nignore = ["NPU3O2"]\n', 3, "unknown diagnostic code 'NPU3O2'"),
    ('[tool.npu-migrate]\nselect = "NPU2"\n', 2, "select must be a list of strings"),
    ('[tool.npu-migrate]\nopmap = ["missing.yaml"]\n', 2, "op-table file not found"),
    ('[tool.npu-migrate.per-file-ignores]\n"tests/*" = ["NPU9X9"]\n', 2, "unknown diagnostic code 'NPU9X9'"),
    ('[tool.npu-migrate]\nselect = [\n', 2, "not valid TOML"),
])
def test_a_mistake_is_an_error_naming_file_and_line(repo, table, line, problem):
    write_tree(repo, {"pyproject.toml": table})
    result = invoke(repo, "--check")
    assert result.exit_code == exitcodes.CONFIG_ERROR
    message = " ".join(result.stderr.split())
    assert f"{repo / 'pyproject.toml'}:{line}:" in message and problem in message


@pytest.mark.slow
def test_opmap_files_are_relative_to_the_pyproject(repo, tmp_path):
    write_tree(repo, {"ops.yaml": "- api: torch.Tensor.double\n  status: unsupported\n  code: NPU902\n"
                                  "  summary: test\n  fallback: {plan: manual, detail: from the project's table}\n",
                      "pyproject.toml": '[tool.npu-migrate]\nopmap = ["ops.yaml"]\n'})
    assert invoke(repo, "--check").exit_code != exitcodes.CONFIG_ERROR
