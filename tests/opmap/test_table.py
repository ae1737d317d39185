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


@pytest.mark.slow
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


# -- the package and environment tables (sections of the same files, the same loader) -----------------
PACKAGES = """
packages:
  - package: flash-attn
    status: replace
    code: NPU130
    replacement: torch_npu.npu_fusion_attention
    reason: CUDA kernels
    source: https://example.org/flash-attn
    fallback: {plan: replace-library, detail: drop it}
"""


def test_sections_load_with_their_source_lines(tmp_path):
    from npu_migrate.opmap import load_sections

    sections = load_sections(write(tmp_path, PACKAGES + """
environment:
  - {kind: variable, name: CUDA_VISIBLE_DEVICES, status: rename, target: ASCEND_RT_VISIBLE_DEVICES, code: NPU221,
     values: device-ids, reason: r, source: s, fallback: {plan: manual, detail: d}}
"""))
    (package,), (env,) = sections.packages, sections.environment
    assert (package.package, package.replacement, package.origin.endswith("ops.yaml:2")) == (
        "flash-attn", "torch_npu.npu_fusion_attention", True)
    assert env.values.admits("0,1,3") and not env.values.admits("3,1") and not env.values.admits("-1")


@pytest.mark.parametrize("record, line, problem", [
    ("  - {package: Flash_Attn, status: compatible, reason: r, source: s}\n", 3, "normalised"),
    ("  - {package: apex, status: replace, code: NPU130, reason: r, source: s, fallback: {plan: manual, detail: d}}\n",
     3, "needs a replacement"),
    ("  - {package: apex, status: unsupported, reason: r, source: s}\n", 3, "needs a diagnostic code"),
    ("  - {package: deepspeed, status: compatible, version: 'newer', code: NPU136, reason: r, source: s,"
     " fallback: {plan: manual, detail: d}}\n", 3, "PEP 440"),
    ("  - {package: apex, status: replace, code: NPU130, replacement: x, reason: r, fallback: {plan: manual, detail: d}}\n",
     3, "missing required key 'source'"),
])
def test_package_record_problems_name_file_and_line(tmp_path, record, line, problem):
    error = error_of(write(tmp_path, "packages:\n  - {package: numpy, status: compatible, reason: r, source: s}\n"
                           + record))
    assert error.line == line and problem in error.problem, error


def test_environment_record_problems_name_file_and_line(tmp_path):
    error = error_of(write(tmp_path, "environment:\n  - {kind: variable, name: X, status: rename, code: NPU222,"
                                     " values: 'sometimes', reason: r, source: s, target: Y,"
                                     " fallback: {plan: manual, detail: d}}\n"))
    assert error.line == 2 and "values 'sometimes'" in error.problem
    error = error_of(write(tmp_path, "environment:\n  - {kind: file, name: X, status: report, code: NPU133,"
                                     " reason: r, source: s, fallback: {plan: manual, detail: d}}\n", "b.yaml"))
    assert error.line == 2 and "kind 'file'" in error.problem


def test_a_repeated_package_key_is_an_error_and_a_later_file_overrides(tmp_path):
    error = error_of(write(tmp_path, PACKAGES + PACKAGES.split("packages:\n")[1]))
    assert error.line == 9 and "package 'flash-attn' is defined twice (first at line 2)" in error.problem
    override = write(tmp_path, "packages:\n  - {package: flash-attn, status: compatible, reason: mine, source: me}\n",
                     "mine.yaml")
    table = load_table([override])
    assert table.package("flash_attn").status == "compatible" and table.package("Flash-Attn").reason == "mine"


def test_lookups_prefer_exact_names_then_the_most_specific_glob():
    table = load_table()
    assert table.package("nvidia-ml-py").package == "nvidia-ml-py"
    assert table.package("nvidia-cudnn-cu12").package == "nvidia-*"
    assert table.package("torch", "cu121").local == "cu*" and table.package("torch", "cpu").status == "compatible"
    assert table.package("torch-scatter", "pt24cu121").code == "NPU131"
    assert table.environment("variable", "NCCL_DEBUG").name == "NCCL_DEBUG"
    assert table.environment("variable", "TORCH_NCCL_ASYNC_ERROR_HANDLING").name == "*NCCL_ASYNC_ERROR_HANDLING"
    assert table.environment("variable", "NCCL_P2P_DISABLE").name == "*NCCL*"
    assert table.environment("variable", "MASTER_ADDR") is None
    assert table.index("https://download.pytorch.org/whl/cu121/").code == "NPU131"
    assert table.index("https://download.pytorch.org/whl/cpu") is None


def test_every_package_and_environment_record_names_its_source():
    table = load_table()
    for record in [*table.packages(), *table.indexes(), *table.environment_records()]:
        assert record.source.strip() and (record.source.startswith("http") or "§" in record.source
                                          or "/" in record.source), record


def test_the_torch_npu_release_table_is_consistent():
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from npu_migrate.opmap.reference import torch_npu_releases

    releases = torch_npu_releases()
    assert releases["2.14.0"].torch_npu == "2.14.0"  # torch_npu_facts.md: torch_npu 2.14.0 for torch 2.14
    for torch, line in releases.items():
        for release in (line.torch_npu, *line.others):
            assert Version(release).public.startswith(torch), (torch, release)  # torch-npu X.Y.Z(.postN) is for X.Y.Z
        assert line.torch_npu not in line.others and set(line.cann) <= {line.torch_npu, *line.others}
        for requirement in line.requires.values():
            name, _, spec = requirement.partition("==")
            assert name == "torch" and Version(torch) in SpecifierSet("==" + spec.split("+")[0]), requirement
