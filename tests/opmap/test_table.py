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
