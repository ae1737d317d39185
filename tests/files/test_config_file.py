"""YAML/JSON configuration files (migrate/files/config_file.py, config_tree.py): what the fixtures do not
show one case at a time: anchors, several documents, JSON with comments, escapes and BOMs, line
endings kept, data files left alone, and the ``config`` records of the environment table."""

import json

import pytest
import yaml

from npu_migrate.migrate.files.base import Facts, FileSyntaxError
from npu_migrate.migrate.files.config_tree import SCALAR, json_tree, walk, yaml_tree
from npu_migrate.migrate.files.kinds import kind_of
from npu_migrate.migrate.files.run import migrate_all
from npu_migrate.migrate.limits import Limits
from npu_migrate.opmap import SchemaError, load_sections
from tests import snippets

NPU = Facts(imports_torch_npu=True)


@pytest.fixture(scope="module")
def table():
    return snippets.builtin_table()


def _migrate(path, text, table, facts=NPU):
    return snippets.migrate(text, path, table=table, facts=facts, status=None)


def _scalars(trees):
    return [(path, node.value, node.verbatim) for tree in trees for path, node, _ in walk(tree) if node.kind == SCALAR]


def test_json_reader_gives_the_offsets_json_would_parse(tmp_path):
    text = '\ufeff{\n  "a": "cuda", "b": [1, -2.5e3, true, null],\n  "c": {"d": "\\ud83d\\ude00 x\\/y"}\n}\n'
    (tree,) = json_tree(text)
    assert json.loads(text.lstrip("\ufeff")) == {"a": "cuda", "b": [1, -2500.0, True, None], "c": {"d": "\U0001F600 x/y"}}
    found = _scalars([tree])
    assert (("a",), "cuda", text.index('"cuda"') + 1) in found
    assert (("c", "d"), "\U0001F600 x/y", None) in found  # escaped: not verbatim, so never edited
    assert [v for p, v, _ in found if p == ("b",)] == ["1", "-2.5e3", "true", "null"]


def test_json_with_comments_and_trailing_commas_is_read_and_bad_json_names_its_line():
    (tree,) = json_tree('// top\n{"a": [1, 2,], /* mid */ "b": "nccl",}\n')
    assert [v for _, v, _ in _scalars([tree])] == ["1", "2", "nccl"]
    for text, line in (('{\n"a": 1\n"b": 2}', 3), ('{"a": 1}\n{"b": 2}\n', 2), ('{\n  "a": tru\n}', 2)):
        with pytest.raises(FileSyntaxError) as error:
            json_tree(text)
        assert error.value.line == line, text


def test_yaml_anchor_properties_and_documents():
    text = "base: &dev !!str cuda\nother: *dev\n---\nbackend: nccl\n"
    found = _scalars(yaml_tree(text))
    assert found == [(("base",), "cuda", text.index("cuda")), (("backend",), "nccl", text.index("nccl"))]


@pytest.mark.slow
def test_an_anchored_value_is_rewritten_once_where_it_is_written(table):
    result = _migrate("conf.yaml", "train: {device: &d cuda}\neval: {device: *d}\n", table)
    assert result.migrated == "train: {device: &d npu}\neval: {device: *d}\n"
    assert [(f.line, f.code, f.action) for f in result.findings] == [(1, "NPU224", "rewritten")]


def test_line_endings_quotes_and_comments_are_kept_byte_for_byte(table):
    text = "# c: device: cuda\r\ndevice: 'cuda:0'   # first GPU\r\nbackend: \"nccl\"\r\n"
    result = _migrate("run.yml", text, table)
    assert result.migrated == "# c: device: cuda\r\ndevice: 'npu:0'   # first GPU\r\nbackend: \"hccl\"\r\n"
    assert yaml.safe_load(result.migrated) == {"device": "npu:0", "backend": "hccl"}


def test_a_json_rewrite_stays_valid_json_with_the_same_structure(table):
    text = '{"device": "cuda", "ddp_backend": "cpu:gloo,cuda:nccl", "n": [1]}'
    result = _migrate("args.json", text, table)
    assert json.loads(result.migrated) == {"device": "npu", "ddp_backend": "cpu:gloo,npu:hccl", "n": [1]}


def test_values_in_longer_text_keys_and_non_strings_are_left_alone(table):
    text = ("cuda: 1\nuse_cuda: true\ndevice_count: 8\nnote: running on cuda\nmode: no-cudagraphs\n"
            "device: 0\nbackend: [cpu, nccl]\n")
    result = _migrate("c.yaml", text, table)
    assert result.status == "unchanged"
    assert [(f.line, f.code) for f in result.findings] == [(7, "NPU138")]  # a list item: a choice, kept


def test_environment_mappings_and_their_references_are_renamed_together(table):
    text = ("env:\n  CUDA_VISIBLE_DEVICES: 0,1\n  PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True\n"
            "jobs:\n  run:\n    steps:\n      - run: echo $CUDA_VISIBLE_DEVICES && nvidia-smi -L\n"
            "log: ${oc.env:PYTORCH_CUDA_ALLOC_CONF}\n")
    result = _migrate(".github/workflows/ci.yml", text, table)
    assert result.migrated == text.replace("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES").replace(
        "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF")
    codes = [(f.line, f.code, f.action) for f in result.findings]
    assert (7, "NPU223", "reported") in codes  # nvidia-smi with options: reported, not renamed


def test_a_reference_the_rename_cannot_follow_keeps_the_whole_variable(table):
    text = "environment:\n  CUDA_VISIBLE_DEVICES: '3,2'\ncommand: python train.py --gpus $CUDA_VISIBLE_DEVICES\n"
    result = _migrate("docker-compose.yml", text, table)
    assert result.status == "unchanged"
    assert [(f.line, f.code, f.action) for f in result.findings] == [(2, "NPU221", "reported"),
                                                                     (3, "NPU221", "reported")]


def test_device_values_wait_for_torch_npu_in_the_code(table):
    result = _migrate("conf.yaml", "device: cuda\n", table, Facts())
    assert result.status == "unchanged"
    assert "does not import torch_npu" in result.findings[0].message and result.findings[0].action == "reported"


def test_templates_and_json_lines_are_reported_not_errors(table):
    result = _migrate("deploy.yaml", "a: 1\n{{- if .Values.gpu }}\nb: 2\n", table)
    # PyYAML stops at line 3 (the template line reads as a flow mapping key that never gets its colon)
    assert result.status == "unchanged" and [(f.line, f.code) for f in result.findings] == [(3, "NPU139")]
    lines = _migrate("data.json", '{"x": "cuda"}\n{"x": "nccl"}\n', table)
    assert lines.status == "unchanged" and lines.findings[0].code == "NPU139" and lines.findings[0].line == 2


def test_data_files_over_the_limit_or_not_utf8_are_copied_without_a_finding(tmp_path, table):
    (tmp_path / "big.json").write_text('{"device": "cuda", "pad": "' + "x" * 4000 + '"}')
    (tmp_path / "latin.yaml").write_bytes("device: cuda\nname: caf\xe9\n".encode("latin-1"))
    declared = [("big.json", kind_of("big.json")), ("latin.yaml", kind_of("latin.yaml"))]
    results, data = migrate_all(tmp_path, declared, [], table, limits=Limits(max_bytes=1000))
    assert results == [] and data == ["big.json", "latin.yaml"]


def test_files_without_a_trigger_are_not_parsed(table):
    assert _migrate("x.yaml", "a: [unclosed\n", table).status == "skipped"
    assert kind_of("conf/train.yaml").name == "config" and kind_of("environment.yml").name == "conda"
    assert kind_of("nb.ipynb") is None


def test_config_records_pick_the_most_specific_value_then_key(table):
    assert table.config("process_group_backend", "nccl").renamed_value("nccl") == "hccl"
    assert table.config("eval_device", "cuda:3").renamed_value("cuda:3") == "npu:3"
    assert table.config("eval_device", "cuda:x").renamed_value("cuda:x") is None  # matched, not exact
    assert table.config("accelerator_device", "cuda").code == "NPU137"  # "accelerator" is more specific
    assert table.config("kernel", "cuda").code == "NPU138" and table.config("kernel", "cudnn") is None


@pytest.mark.parametrize("record, problem", [
    ("{kind: config, name: device, status: report, code: NPU138, reason: r, source: s,"
     " fallback: {plan: manual, detail: d}}", "a value glob is given for kind config"),
    ("{kind: variable, name: X, value: y, status: report, code: NPU133, reason: r, source: s,"
     " fallback: {plan: manual, detail: d}}", "a value glob is given for kind config"),
    ("{kind: config, name: device, value: cuda, status: rename, target: 'npu:*', code: NPU224, reason: r,"
     " source: s, fallback: {plan: manual, detail: d}}", "a * in target needs exactly one * in value"),
])
def test_config_records_are_checked_when_loaded(tmp_path, record, problem):
    path = tmp_path / "env.yaml"
    path.write_text(f"environment:\n  - {record}\n")
    with pytest.raises(SchemaError) as error:
        load_sections(path)
    assert problem in str(error.value) and error.value.line >= 2


def test_build_arguments_are_reported_never_renamed(table):
    text = ("services:\n  x:\n    build:\n      args:\n        CUDA_VISIBLE_DEVICES: '0'\n"
            "    environment:\n      CUDA_VISIBLE_DEVICES: '0'\n"
            "steps:\n  - with:\n      build-args: |\n        CUDA_VERSION=12.4\n        PYTHON_VERSION=3.11\n")
    result = _migrate("compose.yaml", text, table)
    assert result.migrated == text.replace("      CUDA_VISIBLE_DEVICES: '0'\nsteps", "      ASCEND_RT_VISIBLE_DEVICES: '0'\nsteps")
    found = [(f.line, f.code, f.action) for f in result.findings]
    assert found == [(5, "NPU221", "reported"), (7, "NPU221", "rewritten"), (11, "NPU133", "reported")]
    assert "Dockerfile's ARG" in result.findings[0].message


def test_uv_sources_routed_to_a_cuda_index_are_reported_where_they_name_it(table):
    text = ('[project]\nname = "p"\n[tool.uv.sources]\ntorch = { index = "cu" }\n'
            '[[tool.uv.index]]\nname = "cu"\nurl = "https://download.pytorch.org/whl/cu124"\n')
    result = _migrate("pyproject.toml", text, table)
    assert [(f.line, f.code) for f in result.findings] == [(4, "NPU131"), (7, "NPU131")]


def test_a_ci_step_that_writes_github_env_assigns_the_variable(table):
    text = ("steps:\n  - run: |\n      echo \"CUDA_VISIBLE_DEVICES=0,1\" >> \"$GITHUB_ENV\"\n"
            "      echo \"CUDA_VISIBLE_DEVICES=0,1 is the default\"\n"
            "  - run: echo \"CUDA_HOME=${{ matrix.home }}\" >> $GITHUB_ENV\n")
    result = _migrate(".github/workflows/t.yml", text, table)
    assert result.migrated == text.replace("echo \"CUDA_VISIBLE_DEVICES=0,1\" >>",
                                           "echo \"ASCEND_RT_VISIBLE_DEVICES=0,1\" >>")  # the plain echo is text
    assert [(f.line, f.code, f.action) for f in result.findings] == [(3, "NPU221", "rewritten"),
                                                                     (5, "NPU133", "reported")]
