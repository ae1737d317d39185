"""``migrate run`` with the real rule set on a small training script: the device rewrites land,
the patch applies, the output is a fixed point and every reported site names a plan."""

import json

import pytest

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.rules import select_rules
from npu_migrate.opmap import PLANS
from tests.cli.conftest import git, git_init, invoke, snapshot, write_tree

TRAIN = '''import torch
import torch.distributed as dist
from torch.cuda import synchronize as sync


def main(model, x):
    dist.init_process_group("nccl")
    model = model.cuda()
    y = model(x.to("cuda:0"))
    torch.cuda.synchronize()
    sync()
    return y.double()
'''

pytestmark = pytest.mark.skipif(not select_rules(["NPU2"]), reason="device rules not present")


@pytest.mark.slow
def test_real_rules_end_to_end(tmp_path):
    repo = write_tree(tmp_path / "repo", {
        "pkg/__init__.py": "",
        "pkg/train.py": TRAIN,
        "tail.py": "import torch\nw = torch.ones(2).cuda()",
        "README.md": "hello\n",
    })
    git_init(repo)
    result = invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r", "--jobs", "1")
    assert result.exit_code == 0, result.output
    migrated = (tmp_path / "out/pkg/train.py").read_text()
    for expected in ("import torch_npu", '"hccl"', "model.npu()", '"npu:0"', "torch.npu.synchronize()"):
        assert expected in migrated, expected
    report = json.loads((tmp_path / "r/report.json").read_text())
    reported = [f for f in report["findings"] if f["action"] == "reported"]
    assert reported and all(f["fallback"]["plan"] in PLANS and f["fallback"]["detail"] for f in reported)

    patch = tmp_path / "r/changes.patch"
    git(repo, "apply", "--check", str(patch))
    git(repo, "apply", str(patch))
    assert snapshot(repo) == snapshot(tmp_path / "out")

    again = invoke(tmp_path / "out", "--check", "--ignore", "NPU1")
    assert again.exit_code == exitcodes.OK, again.output
