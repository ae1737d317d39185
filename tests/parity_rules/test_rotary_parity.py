"""NPU310 end to end: migrate the fixture models with only the rotary codes selected, then run
``migrate parity`` with each model's own spec (float32 and bfloat16 cases, training where the spec
asks). Every case must pass with the fused kernel really running (``npu_rotary_mul`` in the op
coverage), except GPT-J's complex-number variant, which is reported (NPU311) and not rewritten.

About a minute per model: parity runs each side in its own worker process."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from migrate import exitcodes
from migrate.cli import app

ROOT = Path(__file__).resolve().parents[2]
TARGET = "torch_npu.npu_rotary_mul"

# model tree -> the sites expected in report.json: (file, code) per site
MODELS = {
    "models/llama_gqa": [("modeling_llama.py", "NPU310")] * 2,
    "models/mixtral_moe": [("modeling_mixtral.py", "NPU310")] * 2,
    "models/gptj": [("modeling_gptj.py", "NPU310"), ("modeling_gptj.py", "NPU311")],
    "demo": [("tinyllama/model.py", "NPU310")],
}


def invoke(*args):
    result = CliRunner().invoke(app, [*map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


@pytest.mark.parametrize("model", list(MODELS))
def test_rotary_migration_passes_parity(model, tmp_path):
    original = ROOT / "fixtures" / model
    migrated, reports = tmp_path / "migrated", tmp_path / "report"
    result = invoke("run", original, "--out", migrated, "--report-dir", reports, "--select", "NPU31", "-j", "1")
    assert result.exit_code == exitcodes.OK, result.output

    findings = json.loads((reports / "report.json").read_text())["findings"]
    assert sorted((f["path"], f["code"]) for f in findings) == sorted(MODELS[model])
    for finding in findings:
        if finding["code"] == "NPU310":
            assert finding["action"] == "rewritten" and finding["target"] == TARGET
        else:
            assert finding["action"] == "reported" and finding["fallback"]["plan"] == "composite"

    out = tmp_path / "parity.json"
    result = invoke("parity", "--spec", original / "parity.yaml", "--original", original, "--migrated", migrated,
                    "--json", out)
    report = json.loads(out.read_text())
    assert result.exit_code == exitcodes.OK, result.output
    assert report["passed"] is True
    assert {c["dtype"] for c in report["cases"]} == {"float32", "bfloat16"}
    for case in report["cases"]:
        assert case["passed"], (case["name"], case["dtype"], case["errors"])
        fused = case["op_coverage"]["fused_npu_ops"].get("npu_rotary_mul", 0)
        worst = min(case["outputs"], key=lambda o: o["cosine"] if o["cosine"] is not None else 1.0)
        print(f"{case['name']} {case['dtype']}: cosine {worst['cosine']:.7f}, max abs {worst['max_abs_err']:.3g}, "
              f"npu_rotary_mul calls {fused}")
        assert fused == 0 if "complex" in case["name"] else fused > 0, (case["name"], case["dtype"])
