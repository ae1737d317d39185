"""``migrate parity`` reports what ran at each rewritten site: a model that takes its SDPA branch
passes, but its hand-written attention (rewritten, imported, never run fused) is NOT PROVEN: its own
verdict, exit bit 128, in the console, the JSON and report.md/report.html."""

import json

import pytest
from typer.testing import CliRunner

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.cli import app
from npu_migrate.migrate.outputs import parity_result

MODEL = '''import math

import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, flash=True):
        super().__init__()
        self.flash = flash
        self.qkv = nn.Linear(32, 96)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, 4, 8).transpose(1, 2)
        k = k.view(b, t, 4, 8).transpose(1, 2)
        v = v.view(b, t, 4, 8).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = F.softmax(att, dim=-1)
            y = att @ v
        return y.transpose(1, 2).reshape(b, t, c)


def build(flash=True):
    return Block(flash)
'''
SPEC = '''cases:
  - name: block
    factory: model.py:build
    kwargs: {flash: %s}
    inputs: {x: {shape: [2, 5, 32]}}
    dtypes: [float32]
'''


def run(*args):
    result = CliRunner().invoke(app, list(map(str, args)))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    root = tmp_path_factory.mktemp("sites")
    (root / "repo").mkdir()
    (root / "repo" / "model.py").write_text(MODEL)
    assert run("run", root / "repo", "--out", root / "repo-npu", "--report-dir", root / "report", "-q").exit_code == 0
    return root


@pytest.mark.slow
@pytest.mark.parametrize("flash", [True, False])
def test_a_rewritten_site_whose_fused_path_never_ran_is_not_proven(trees, flash):
    spec = trees / f"parity-{flash}.yaml"
    spec.write_text(SPEC % str(flash).lower())
    out = trees / f"parity-{flash}.json"
    result = run("parity", "--spec", spec, "--original", trees / "repo", "--migrated", trees / "repo-npu",
                 "--json", out)
    report = json.loads(out.read_text())
    assert report["passed"] and not report["proven"]
    assert result.exit_code == exitcodes.NOT_PROVEN, result.output
    status = {s["code"]: s["status"] for s in report["sites"]}
    ran, idle = ("NPU301", "NPU302") if flash else ("NPU302", "NPU301")
    assert status == {ran: "proven", idle: "not proven"}
    runs = {s["code"]: s["runs"]["block [float32]"] for s in report["sites"]}
    assert (runs[ran]["calls"], runs[ran]["fused"]) == (1, 1) and runs[idle]["calls"] == 0
    assert "NOT PROVEN" in result.output and "ran 1/1" in result.output and "not reached" in result.output
    assert "NOT PROVEN: 1 numerics-changing site(s)" in parity_result.verdict(report)
    rows = {r["site"].rsplit(":", 1)[1]: r for r in parity_result.site_rows(report)}
    assert rows[ran]["block [float32]"] == "ran 1/1" and rows[idle]["status"] == "not proven"
