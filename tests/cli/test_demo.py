"""``migrate demo``: the bundled repo migrates, its patch applies, its output imports and runs on
the emulated NPU, and the parity run that ends the demo passes."""

import json
import subprocess
import sys

from typer.testing import CliRunner

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.cli.app import app
import pytest

pytestmark = pytest.mark.slow


def test_demo_migrates_applies_imports_and_passes_parity(tmp_path):
    result = CliRunner().invoke(app, ["demo", "--workdir", str(tmp_path)])
    assert result.exit_code == exitcodes.OK, result.output
    repo, out, reports = tmp_path / "demo", tmp_path / "demo-npu", tmp_path / "npu-migrate-report"

    report = json.loads((reports / "report.json").read_text())
    assert report["summary"]["files_errored"] == 0
    targets = {f["target"] for f in report["findings"] if f["action"] == "rewritten"}
    assert {"torch_npu.npu_fusion_attention", "torch_npu.npu_rms_norm", "torch_npu.npu_swiglu"} <= targets
    assert all(f["fallback"]["plan"] for f in report["findings"] if f["action"] == "reported")
    assert json.loads((reports / "parity.json").read_text())["passed"] is True
    page = (reports / "report.html").read_text()  # rebuilt with the parity result at the end
    assert "Parity: passed" in page and "tinyllama-train-step" in page
    assert {p.name for p in reports.iterdir()} >= {"report.json", "report.md", "report.sarif", "report.html"}

    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    applied = subprocess.run(["git", "apply", "--check", str(reports / "changes.patch")], cwd=repo,
                             capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr

    # the migrated package imports and runs a forward pass on the emulated NPU
    script = (
        "import torch\nfrom npu_migrate import kernels\n"
        "with kernels.emulate():\n"
        "    from tinyllama.model import build_tiny\n"
        "    model = build_tiny().npu()\n"
        "    logits = model(torch.randint(0, 128, (2, 8)).npu())\n"
        "    print(tuple(logits.shape))\n"
    )
    run = subprocess.run([sys.executable, "-c", script], cwd=out, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().startswith("(2, 8")
