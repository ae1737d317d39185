"""NPU301-NPU303 end to end: migrate each fixture model with only the attention codes selected, then
run ``migrate parity`` with the model's own spec (float32 and bfloat16, training where the spec
asks). Every case must pass, with the fused kernel really running (``npu_fusion_attention`` in the
op coverage) except where the guard sends the call back to the original code by design.

About a minute per model: parity runs each side in its own worker process."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from migrate import exitcodes
from migrate.cli import app

ROOT = Path(__file__).resolve().parents[2]
TARGET = "torch_npu.npu_fusion_attention"

# model -> (the sites expected in report.json as (file, code, action), cases that must not fuse)
MODELS = {
    "nanogpt": ([("model.py", "NPU301", "rewritten"), ("model.py", "NPU302", "rewritten")], set()),
    # left-padded batch + causal mask: fully masked query rows, so the guard keeps the eager path
    "llama_gqa": ([("modeling_llama.py", "NPU302", "rewritten")], {"llama-gqa-tiny"}),
    # output_attentions=True: the probabilities are returned, so the eager path runs
    "bert": ([("modeling_bert.py", "NPU302", "rewritten")], {"bert-mlm-tiny-output-attentions"}),
    "mixtral_moe": ([("modeling_mixtral.py", "NPU301", "rewritten")], set()),
    # _attn returns its probabilities to a caller the rule does not follow: reported, not fused
    "gptj": ([("modeling_gptj.py", "NPU303", "reported")], {"gptj-tiny", "gptj-tiny-complex-rope"}),
}


def invoke(*args):
    result = CliRunner().invoke(app, [*map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


@pytest.mark.parametrize("model", list(MODELS))
def test_attention_migration_passes_parity(model, tmp_path):
    original = ROOT / "fixtures" / "models" / model
    sites, unfused = MODELS[model]
    migrated, reports = tmp_path / "migrated", tmp_path / "report"
    result = invoke("run", original, "--out", migrated, "--report-dir", reports, "--select", "NPU30", "-j", "1")
    assert not result.exit_code & (exitcodes.INTERNAL_ERROR | exitcodes.FILE_ERRORS), result.output

    findings = json.loads((reports / "report.json").read_text())["findings"]
    assert sorted((f["path"], f["code"], f["action"]) for f in findings) == sorted(sites)
    for finding in findings:
        if finding["action"] == "rewritten":
            assert finding["target"] == TARGET
        else:
            assert finding["fallback"]["plan"] == "composite"

    out = tmp_path / "parity.json"
    invoke("parity", "--spec", original / "parity.yaml", "--original", original, "--migrated", migrated, "--json", out)
    report = json.loads(out.read_text())
    assert {c["dtype"] for c in report["cases"]} >= {"float32", "bfloat16"}
    for case in report["cases"]:
        failed = [e for kind in ("outputs", "gradients", "after_step") for e in case[kind]
                  if not e["passed"]]
        assert not case["errors"] and not failed, (case["name"], case["dtype"], case["errors"], failed[:3])
        fused = case["op_coverage"]["fused_npu_ops"].get("npu_fusion_attention", 0)
        worst = min(case["outputs"], key=lambda o: o["cosine"] if o["cosine"] is not None else 1.0)
        print(f"{case['name']} {case['dtype']}: cosine {worst['cosine']:.7f}, max abs {worst['max_abs_err']:.3g}, "
              f"npu_fusion_attention calls {fused}")
        assert (fused == 0) if case["name"] in unfused else (fused > 0), (case["name"], case["dtype"], fused)
