"""The op-table loader: every schema problem is reported as ``file:line: problem``."""

import textwrap

import pytest

from npu_migrate.opmap import SchemaError, load_file, load_table


def write(tmp_path, text, name="ops.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def error_of(path):
    with pytest.raises(SchemaError) as info:
        load_file(path)
    return info.value


GOOD = """
- api: torch.cuda.synchronize
  status: rename
  code: NPU201
  target: torch.npu.synchronize
"""


def test_a_valid_file_loads_with_its_source_line(tmp_path):
    (record,) = load_file(write(tmp_path, GOOD))
    assert (record.api, record.status, record.target) == ("torch.cuda.synchronize", "rename", "torch.npu.synchronize")
    assert record.source.endswith("ops.yaml:1")


def test_unknown_key_names_file_and_line(tmp_path):
    error = error_of(write(tmp_path, GOOD + "  colour: red\n"))
    assert (error.line, error.path.endswith("ops.yaml")) == (5, True)
    assert "unknown key 'colour'" in str(error) and str(error).startswith(f"{error.path}:5:")


def test_unsupported_without_fallback_is_an_error_at_its_record(tmp_path):
    error = error_of(write(tmp_path, GOOD + "- api: torch.jit.script\n  status: unsupported\n  code: NPU111\n"))
    assert error.line == 5 and "needs a fallback plan" in error.problem


def test_duplicate_api_in_one_file(tmp_path):
    error = error_of(write(tmp_path, GOOD + GOOD))
    assert error.line == 6 and "defined twice (first at line 1)" in error.problem


def test_bad_plan(tmp_path):
    error = error_of(write(tmp_path, """
        - api: triton.*
          status: unsupported
          code: NPU105
          fallback: {plan: rewrite-it, detail: port the kernel}
    """))
    assert error.line == 4 and "fallback.plan 'rewrite-it'" in error.problem


def test_bad_code(tmp_path):
    error = error_of(write(tmp_path, GOOD.replace("NPU201", "E201")))
    assert error.line == 3 and "must look like NPU123" in error.problem


def test_user_file_overrides_and_extends_the_builtin_table(tmp_path):
    extra = write(tmp_path, """
        - api: torch.cuda.synchronize
          status: unsupported
          code: NPU201
          fallback: {plan: manual, detail: our cluster forbids device-wide syncs}
        - api: mylib.fast_op
          status: fallback
          code: NPU104
          fallback: {plan: cpu, detail: run it on the CPU}
    """)
    table = load_table([extra])
    assert table.get("torch.cuda.synchronize").status == "unsupported"
    assert table.get("mylib.fast_op").fallback.plan == "cpu"
    assert load_table().get("torch.cuda.synchronize").status == "rename"  # the built-in one is untouched


def test_lookup_is_exact_then_longest_prefix():
    table = load_table()
    assert table.get("torch.cuda.synchronize").target == "torch.npu.synchronize"
    assert table.get("torch.cuda.nvtx.range_push").api == "torch.cuda.nvtx.*"  # longer prefix wins
    assert table.get("torch.cuda.list_gpu_processes").api == "torch.cuda.*"
    assert table.get("flash_attn.flash_attn_func").api == "flash_attn.flash_attn_func"
    assert table.get("flash_attn.bert_padding.unpad_input").api == "flash_attn.*"
    assert table.get("numpy.float64") is None


def test_every_builtin_reported_record_has_an_actionable_fallback():
    for record in load_table().records():
        if record.status in ("unsupported", "fallback"):
            assert record.fallback.plan and len(record.fallback.detail) > 40, record.api


# Each of these ended in a traceback (exit 1) or was silently accepted before the strict loader.
HOSTILE = {
    "python-tag": ("- api: !!python/object/apply:os.system ['echo hi']\n  status: native\n",
                   1, "YAML tag !!python/object/apply:os.system is not allowed"),
    "custom-tag": (GOOD.lstrip().replace("NPU201", "!code NPU201"), 3, "YAML tag !code is not allowed"),
    "unhashable-key": ("- ? [api, status]\n  : native\n", 1, "a mapping key must be a plain value, not a list (unhashable)"),
    "deep-nesting": ("[" * 5000 + "]" * 5000 + "\n", 1, "nested deeper than 32 levels"),
    "second-records": ("records:\n" + GOOD.lstrip() + "records:\n- {api: torch.cuda.foo, status: native}\n",
                       6, "duplicate key 'records' (first at line 1)"),
    "merge-key": ("- &base {api: a.b, status: native}\n- {<<: *base, api: a.c}\n", 2, "merge keys (<<) are not supported"),
    "nan-tolerance": (GOOD.lstrip() + "  tolerance: {float32: {rtol: .nan, atol: 0, reason: r}}\n",
                      5, "tolerance.float32.rtol must be a finite number, got nan"),
    "inf-tolerance": (GOOD.lstrip() + "  tolerance: {float32: {rtol: 0, atol: .inf, reason: r}}\n",
                      5, "tolerance.float32.atol must be a finite number, got inf"),
    "expression-target": (GOOD.lstrip().replace("torch.npu.synchronize", "'__import__(\"os\").system(\"x\")'"),
                          4, "target must be a dotted Python name"),
    "keyword-target": (GOOD.lstrip().replace("torch.npu.synchronize", "torch.npu.lambda"), 4, "'lambda' is a Python keyword"),
    "expression-args": (GOOD.lstrip() + "  args: {device: 'x); import os'}\n", 5, "is not an argument name"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_yaml_is_a_file_line_problem(tmp_path, case):
    text, line, problem = HOSTILE[case]
    error = error_of(write(tmp_path, text))
    assert error.line == line and problem in error.problem, str(error)
    assert str(error).startswith(f"{error.path}:{line}: ")


def test_anchors_and_aliases_still_share_values(tmp_path):
    records = load_file(write(tmp_path, GOOD + "  preconditions: &pre [a, b]\n"
                                          "- {api: torch.cuda.foo, status: rename, code: NPU201, target: torch.npu.foo,"
                                          " preconditions: *pre}\n"))
    assert [r.preconditions for r in records] == [("a", "b"), ("a", "b")]


def test_migrate_run_exits_32_with_the_problem(tmp_path):
    from typer.testing import CliRunner

    from npu_migrate.migrate import exitcodes
    from npu_migrate.migrate.cli import app

    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "m.py").write_text("import torch\nx = torch.zeros(1).cuda()\n")
    table = write(tmp_path, HOSTILE["python-tag"][0])
    result = CliRunner().invoke(app, ["run", str(tmp_path / "repo"), "--opmap", str(table), "--out", str(tmp_path / "out")])
    assert result.exit_code == exitcodes.CONFIG_ERROR
    assert f"{table}:1: YAML tag !!python/object/apply:os.system is not allowed" in result.output.replace("\n", "")
    assert not (tmp_path / "out").exists()
