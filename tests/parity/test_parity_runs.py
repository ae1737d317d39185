"""End-to-end parity runs. Each run starts one worker process per side, so cases are grouped into
two runs: the fixture's correct migration, and a generated pair of trees holding one package per
planted mistake plus a Hugging Face model (the same factory file in both trees)."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.cli import app
from npu_migrate.migrate.parity import SpecError, run_parity

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "parity"
HF_FACTORY = FIXTURES / "hf_llama" / "hf_llama.py"
ORIGINAL = FIXTURES / "tiny_llama" / "tinyllama" / "model.py"
MIGRATED = FIXTURES / "tiny_llama-npu" / "tinyllama" / "model.py"

# planted mistake -> (text in the correct migration, mistaken text, module expected to be named)
MISTAKES = {
    "inverted-mask": ("atten_mask=attention_mask < 0", "atten_mask=attention_mask >= 0", "layers.0.self_attn"),
    "missing-scale": (", scale=self.scale", "", "layers.0.self_attn"),
    "interleaved-rotary": (
        "npu_rotary_mul(q, cos, sin)", 'npu_rotary_mul(q, cos, sin, rotary_mode="interleave")', "layers.0.self_attn"
    ),
    "swapped-swiglu": ("torch.cat([gate, up], dim=-1)", "torch.cat([up, gate], dim=-1)", "layers.0.mlp"),
    "wrong-epsilon": (", epsilon=self.variance_epsilon)", ")", "layers.0.input_layernorm"),
}
# not a mistake in the numbers, but uses an op without an NPU kernel and float64
COVERAGE = (
    "        return torch_npu.npu_rms_norm(",
    "        hidden_states = hidden_states + 0 * torch.digamma(hidden_states.double().abs() + 1).to(hidden_states.dtype)\n"
    "        return torch_npu.npu_rms_norm(",
)
BUILD_FAILS = ("return TinyLlama(Config(**overrides)).npu()", 'raise RuntimeError("planted build failure")')
# the migrated attention passes a head count the kernel refuses: the forward raises inside the op
RAISES = ('self.num_heads, "BNSD"', 'self.num_heads + 1, "BNSD"')


def invoke(*args):
    result = CliRunner().invoke(app, ["parity", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def planted(source: str, old: str, new: str) -> str:
    assert source.count(old) >= 1, f"fixture text not found: {old!r}"
    return source.replace(old, new)


@pytest.fixture(scope="module")
def correct_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("correct") / "parity.json"
    result = invoke("--spec", FIXTURES / "tiny_llama" / "parity.yaml", "--json", out)
    return result, json.loads(out.read_text())


@pytest.fixture(scope="module")
def mistakes_run(tmp_path_factory):
    """One original tree and one `-npu` tree, with a copy of the package per planted mistake."""
    root = tmp_path_factory.mktemp("mistakes")
    original, migrated = root / "tree", root / "tree-npu"
    variants = {name: (old, new) for name, (old, new, _) in MISTAKES.items()}
    variants.update({"coverage": COVERAGE, "build-fails": BUILD_FAILS, "raises": RAISES, "only-in-original": None})
    cases = []
    for name, change in variants.items():
        package = "m_" + name.replace("-", "_")
        sides = [(original, ORIGINAL.read_text())]
        if change is not None:  # "only-in-original": the migrated tree lacks the package
            sides.append((migrated, planted(MIGRATED.read_text(), *change)))
        for tree, source in sides:
            (tree / package).mkdir(parents=True)
            (tree / package / "__init__.py").write_text("")
            (tree / package / "model.py").write_text(source)
        cases.append(f"  - {{name: {name}, factory: '{package}/model.py:build_model', inputs: '{package}/model.py:make_inputs'}}")
    # the same installed code on both sides: the migrated tree holds none of it
    cases.append("  - {name: no-migrated-code, factory: 'torch.nn:Linear', kwargs: {in_features: 4, out_features: 4},"
                 " inputs: {input: {shape: [2, 4]}}}")
    for tree in (original, migrated):
        shutil.copy(HF_FACTORY, tree / HF_FACTORY.name)
    cases.append(
        "  - {name: hf-llama, factory: 'hf_llama.py:build_model', output: logits,"
        " inputs: {input_ids: {shape: [2, 16], dtype: int64, low: 0, high: 128}}}"
    )
    spec = original / "parity.yaml"
    spec.write_text("cases:\n" + "\n".join(cases) + "\n")
    out = root / "parity.json"
    result = invoke("--spec", spec, "--json", out)  # --migrated defaults to tree-npu
    report = json.loads(out.read_text())
    return result, {case["name"]: case for case in report["cases"]}


def test_correct_migration_passes_in_float32_bfloat16_and_training(correct_run):
    result, report = correct_run
    assert result.exit_code == exitcodes.OK, result.output
    assert report["passed"] is True
    cases = {(c["name"], c["dtype"]): c for c in report["cases"]}
    assert set(cases) == {("tiny-llama", "float32"), ("tiny-llama", "bfloat16"), ("tiny-llama-train", "float32")}
    for case in cases.values():
        assert case["passed"] and case["first_divergent_module"] is None
        assert case["op_coverage"]["fallback_ops"] == {} and case["op_coverage"]["float64_ops"] == {}
        assert case["op_coverage"]["fused_npu_ops"]["npu_fusion_attention"] > 0
    train = cases[("tiny-llama-train", "float32")]
    # train: true runs AdamW foreach and fused, 3 steps each from the same weights, on the projection loss
    losses = {f"{optimizer}/step{step}" for optimizer in ("adamw-foreach", "adamw-fused") for step in (1, 2, 3)}
    assert {g["name"] for g in train["gradients"]} >= losses | {"embed_tokens.weight", "layers.0.mlp.up_proj.weight"}
    assert all(g["passed"] for g in train["gradients"])
    assert {t["name"].split("/")[0] for t in train["after_step"]} == {"adamw-foreach", "adamw-fused"}
    assert all(t["passed"] for t in train["after_step"])
    assert "3/3 case(s) passed" in result.stdout
    # the table names the fused kernels that ran and, in a non-terminal, is not squashed to 80 columns
    assert "fused NPU kernels" in result.stdout and "npu_fusion_attention x2" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) > 120


@pytest.mark.parametrize("mistake", MISTAKES)
def test_planted_mistake_fails_and_names_the_module(mistakes_run, mistake):
    result, cases = mistakes_run
    assert result.exit_code == exitcodes.PARITY_FAILED | exitcodes.CONFIG_ERROR  # 32: the setup errors below
    case = cases[mistake]
    assert case["verdict"] == "diverged"
    assert case["passed"] is False and not case["errors"]
    divergent = case["first_divergent_module"]
    assert divergent["module"] == MISTAKES[mistake][2]
    assert divergent["call"] == 0 and divergent["inputs_agree"] is True
    assert divergent["metrics"] and divergent["neighbours"]


def test_op_coverage_lists_fallback_ops_and_float64(mistakes_run):
    _, cases = mistakes_run
    case = cases["coverage"]
    assert case["passed"] is True
    assert case["op_coverage"]["fallback_ops"]["aten::digamma.default"] == 5  # 5 norm calls
    assert "aten::_to_copy.default" in case["op_coverage"]["float64_ops"]


def test_model_that_raises_during_build_is_an_error_naming_the_side(mistakes_run):
    result, cases = mistakes_run
    case = cases["build-fails"]
    assert case["passed"] is False
    assert case["errors"][0].startswith("migrated side: the factory m_build_fails/model.py:build_model raised")
    assert "RuntimeError: planted build failure" in case["errors"][0]
    assert "migrated side: the factory" in result.stdout


def test_a_raising_migrated_model_names_the_module_and_the_op(mistakes_run):
    """Used to give the traceback only: first_divergent_module was null and no module was named."""
    result, cases = mistakes_run
    case = cases["raises"]
    assert case["verdict"] == "raised" and case["first_divergent_module"] is None
    assert case["raised_in"] == {
        "side": "migrated", "module": "layers.0.self_attn", "call": 0, "op": "npu_fusion_attention",
        "at": "m_raises/model.py:67 in forward",
        "error": "NpuOpError: npu_fusion_attention: query has 4 heads but head_num=5",
    }
    assert "raised on the migrated side in layers.0.self_attn (call 0), op npu_fusion_attention, at m_raises/model.py:67" \
        in result.stdout
    assert case["op_coverage"]["fused_npu_ops"]["npu_rms_norm"] == 1  # what ran before the raise


def test_a_factory_the_migrated_tree_lacks_is_not_taken_from_the_original(mistakes_run):
    """The spec sits in the original tree: its copy of the package must not stand in for the migrated one."""
    _, cases = mistakes_run
    case = cases["only-in-original"]
    assert case["verdict"] == "setup error"
    assert "m_only_in_original/model.py not found in the migrated tree" in case["errors"][0]
    assert "lies in the other side's tree" in case["errors"][0]


def test_a_migrated_side_without_code_of_its_own_is_an_error_not_a_pass(mistakes_run):
    _, cases = mistakes_run
    case = cases["no-migrated-code"]
    assert case["verdict"] == "setup error" and not case["passed"]
    assert "holds none of the model's code" in case["errors"][0] and "would compare a model with itself" in case["errors"][0]


def test_spec_error_exits_with_config_error(tmp_path):
    spec = tmp_path / "parity.yaml"
    spec.write_text("cases:\n  - name: a\n    factory: m.py:f\n    inputs: m.py:g\n    dtype: [float32]\n")
    result = invoke("--spec", spec)
    assert result.exit_code == exitcodes.CONFIG_ERROR
    assert "parity.yaml:5: unknown key 'dtype' in a case" in result.stderr


def test_hugging_face_llama_against_its_copy(mistakes_run):
    _, cases = mistakes_run
    case = cases["hf-llama"]
    assert case["passed"] is True, case
    assert [o["name"] for o in case["outputs"]] == ["output"]  # the selected logits
    assert case["first_divergent_module"] is None


def test_missing_migrated_tree_is_a_config_error(tmp_path):
    spec = tmp_path / "tree" / "parity.yaml"
    spec.parent.mkdir()
    spec.write_text("cases:\n  - {name: a, factory: 'm.py:f', inputs: 'm.py:g'}\n")
    with pytest.raises(SpecError, match="tree-npu is not a directory"):
        run_parity(spec)
