"""NPU320/NPU330/NPU340 end to end: migrate the fixture models with only the norm, MLP and MoE codes
selected, then run ``migrate parity`` with each model's own spec (float32 and bfloat16, training where
the spec asks). Every case must pass, with the fused kernels really running where they can: the
llama GELU case must fall back to its original MLP (the activation is only known at run time), and
training cases keep the original router (the gating kernel has no backward).

About a minute per model: parity runs each side in its own worker process."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from migrate import exitcodes
from migrate.cli import app

ROOT = Path(__file__).resolve().parents[2]
RMS, SWIGLU, GATING = "torch_npu.npu_rms_norm", "torch_npu.npu_swiglu", "torch_npu.npu_moe_gating_top_k_softmax"

# model tree -> the sites expected in report.json: (file, code, target)
MODELS = {
    "models/llama_gqa": [("modeling_llama.py", "NPU320", RMS), ("modeling_llama.py", "NPU330", SWIGLU)],
    "models/mixtral_moe": [("modeling_mixtral.py", "NPU320", RMS), ("modeling_mixtral.py", "NPU330", SWIGLU),
                           ("modeling_mixtral.py", "NPU340", GATING)],
    "demo": [("tinyllama/model.py", "NPU320", RMS), ("tinyllama/model.py", "NPU330", SWIGLU)],
}


def invoke(*args):
    result = CliRunner().invoke(app, [*map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def expected_fused(case: dict, op: str) -> bool:
    """Whether ``op`` must have run in this parity case."""
    if op == "npu_swiglu" and "gelu" in case["name"]:
        return False  # hidden_act=gelu_pytorch_tanh: the run-time SiLU check keeps the original MLP
    return True


@pytest.mark.parametrize("model", list(MODELS))
def test_norm_mlp_moe_migration_passes_parity(model, tmp_path):
    original = ROOT / "fixtures" / model
    migrated, reports = tmp_path / "migrated", tmp_path / "report"
    result = invoke("run", original, "--out", migrated, "--report-dir", reports, "--select", "NPU32,NPU33,NPU34",
                    "-j", "1")
    assert result.exit_code == exitcodes.OK, result.output

    findings = json.loads((reports / "report.json").read_text())["findings"]
    assert sorted({(f["path"], f["code"], f["target"]) for f in findings}) == sorted(MODELS[model])
    assert all(f["action"] == "rewritten" for f in findings)

    out = tmp_path / "parity.json"
    result = invoke("parity", "--spec", original / "parity.yaml", "--original", original, "--migrated", migrated,
                    "--json", out)
    report = json.loads(out.read_text())
    assert result.exit_code == exitcodes.OK, result.output
    assert report["passed"] is True
    assert {c["dtype"] for c in report["cases"]} == {"float32", "bfloat16"}
    ops = {target.split(".")[-1] for _, _, target in MODELS[model]}
    for case in report["cases"]:
        assert case["passed"], (case["name"], case["dtype"], case["errors"])
        fused = case["op_coverage"]["fused_npu_ops"]
        worst = min(case["outputs"], key=lambda o: o["cosine"] if o["cosine"] is not None else 1.0)
        print(f"{case['name']} {case['dtype']}: cosine {worst['cosine']:.7f}, max abs {worst['max_abs_err']:.3g}, "
              f"fused {dict(sorted((k, v) for k, v in fused.items() if k in ops))}")
        for op in ops:
            assert (fused.get(op, 0) > 0) == expected_fused(case, op), (case["name"], case["dtype"], op, fused)
