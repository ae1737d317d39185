"""What the per-rule fixtures cannot show for the device-layer and unsupported-op rules: that the
table-driven rules cover every record, that every code is documented and owned, and that a
realistic CUDA training script migrates into code that runs on the emulated NPU."""

import re
import runpy

import libcst as cst
import pytest

from npu_migrate import kernels
from npu_migrate.migrate.catalogue import all_codes
from npu_migrate.migrate.diagnostics import DOCS_DIR
from npu_migrate.migrate.rules.unsupported.compile_mode import CompileMode
from npu_migrate.migrate.rules.device.cuda_api import CudaApi
from npu_migrate.migrate.rules.device.cuda_method import CudaMethod
from npu_migrate.migrate.rules.device.device_string import DeviceString
from npu_migrate.migrate.rules.unsupported.float64 import Float64
from npu_migrate.migrate.rules.device.is_cuda import IsCuda
from npu_migrate.migrate.rules.device.nccl_backend import NcclBackend
from npu_migrate.migrate.rules.unsupported.unsupported_api import UnsupportedApi
from tests import snippets

DEVICE_RULES = [CudaApi, DeviceString, CudaMethod, IsCuda, NcclBackend, Float64, UnsupportedApi, CompileMode]
TABLE_RULES = [CudaApi, NcclBackend, Float64, UnsupportedApi, CompileMode]
HEADINGS = ["## What it does", "## Why", "## Example", "## Fix safety", "## Known problems"]


@pytest.fixture(scope="module")
def table():
    return snippets.builtin_table()


def migrate(table, source, rules=DEVICE_RULES):
    return snippets.migrate(source, "example.py", rules=rules, table=table)


def use_of(api: str) -> str:
    """A tiny source that uses ``api`` (a name below it, for a prefix record) on line 2."""
    name = api[:-2] + ".some_name" if api.endswith(".*") else api
    return f"import {name.split('.')[0]}\nvalue = {name}\n"


def owned_records(table, rules):
    codes = {code for rule in rules for code in rule.all_codes()}
    return [r for r in table.records() if r.code in codes and not r.api.startswith(("Tensor.", "Module.", "pattern."))]


@pytest.mark.slow
def test_every_reported_record_is_reported_with_its_plan(table):
    records = [r for r in owned_records(table, TABLE_RULES) if r.status in ("unsupported", "fallback")]
    assert len(records) > 30
    for record in records:
        findings = [f for f in migrate(table, use_of(record.api)).findings if f.line == 2]
        assert [(f.code, f.action) for f in findings] == [(record.code, "reported")], record.api
        assert findings[0].fallback == record.fallback, record.api


def test_every_rename_record_is_rewritten_to_its_target(table):
    records = [r for r in owned_records(table, TABLE_RULES) if r.status == "rename"]
    assert len(records) > 80
    uses = [f"value_{i} = {r.api}\n" for i, r in enumerate(records)]  # one file: the engine's imports step is slow
    result = migrate(table, "import torch\n" + "".join(uses))
    for i, record in enumerate(records):
        assert f"value_{i} = {record.target}\n" in result.migrated, record.api
    assert result.migrated.startswith("import torch\nimport torch_npu  # noqa: F401\n")
    assert [(f.code, f.target) for f in result.findings] == [(r.code, r.target) for r in records]


def test_every_code_has_a_doc_page_with_the_five_headings():
    missing = [code for code in all_codes() if not (DOCS_DIR / f"{code}.md").is_file()]
    assert not missing, f"codes without a doc page in migrate/docs: {missing}"
    for code in all_codes():
        text = (DOCS_DIR / f"{code}.md").read_text(encoding="utf-8")
        assert text.startswith(f"# {code}: "), code
        positions = [text.find(h) for h in HEADINGS]
        assert -1 not in positions and positions == sorted(positions), f"{code}: headings missing or out of order"


def test_no_orphan_doc_pages():
    codes = set(all_codes())
    orphans = [p.name for p in DOCS_DIR.glob("*.md") if p.stem not in codes]
    assert not orphans, f"doc pages without a code: {orphans}"


def test_every_op_table_code_is_owned_by_a_rule(table):
    codes = set(all_codes())
    unowned = sorted({(r.code, r.api) for r in table.records() if r.code and r.code not in codes})
    assert not unowned


def test_my_codes_stay_in_their_groups():
    for rule in DEVICE_RULES:
        for code in rule.all_codes():
            assert re.fullmatch(r"NPU(1\d\d|2\d\d)", code), (rule.__name__, code)


def test_rewrites_are_never_nested_or_doubled(table):
    source = "import torch\nwith torch.cuda.amp.autocast():\n    x = torch.zeros(1, device='cuda').cuda()\n"
    result = migrate(table, source)
    assert "torch.npu.amp.autocast()" in result.migrated and "device='npu').npu()" in result.migrated
    assert result.migrated.count("import torch_npu") == 1


TRAIN_SCRIPT = '''\
"""Train a small classifier on synthetic data: one GPU, or DDP when launched with torchrun."""
import argparse
import io
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.cuda.amp import GradScaler

torch.backends.cudnn.benchmark = True  # input shapes are fixed


def get_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda", help="the accelerator to train on")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--amp", action="store_true", help="bf16 autocast")
    return parser.parse_args(argv)


class MLP(nn.Module):
    def __init__(self, dim=16, hidden=32, classes=4):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


def setup_distributed():
    if "RANK" not in os.environ:
        return 0
    backend = "nccl" if dist.is_nccl_available() else "gloo"
    dist.init_process_group(backend=backend)
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    return local_rank


def main(argv=None):
    args = get_args(argv)
    local_rank = setup_distributed()
    use_cuda = args.device == "cuda" and torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)

    model = MLP().to(device)
    if torch.cuda.device_count() > 1:
        model = nn.DataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = GradScaler(enabled=False)
    x = torch.randn(64, 16).cuda()
    y = torch.randint(0, 4, (64,)).to(device, non_blocking=True)

    losses = []
    for step in range(args.steps):
        start = time.time()
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=args.amp):
            loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        torch.cuda.synchronize()
        losses.append(loss.item())
        where = "gpu" if x.is_cuda else "host"
        print(f"step {step}: loss {loss.item():.4f} on {where} ({time.time() - start:.3f}s, "
              f"{torch.cuda.memory_allocated() / 2**20:.1f} MiB)")

    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    model.load_state_dict(torch.load(buffer, map_location=f"cuda:{local_rank}"))
    return losses


if __name__ == "__main__":
    main()
'''


@pytest.mark.slow
def test_training_script_end_to_end(table, tmp_path):
    result = migrate(table, TRAIN_SCRIPT)
    migrated = result.migrated
    cst.parse_module(migrated)
    for expected in ['default="npu"', "from torch_npu.npu.amp import GradScaler", '"hccl" if dist.is_hccl_available()',
                     "torch.npu.set_device(local_rank)", 'args.device == "npu" and torch.npu.is_available()',
                     'torch.device("npu", local_rank)', "torch.randn(64, 16).npu()", 'device_type="npu"',
                     '"gpu" if x.is_npu', 'map_location=f"npu:{local_rank}"', "import torch_npu  # noqa: F401\n"]:
        assert expected in migrated, expected
    assert not re.search(r"torch\.cuda|[\"']cuda|\.cuda\(|is_cuda|nccl", migrated)
    reported = {(f.code, f.api) for f in result.findings if f.action == "reported"}
    assert reported == {("NPU102", "torch.backends.cudnn.benchmark"), ("NPU110", "torch.nn.DataParallel")}
    assert all(f.fallback.detail for f in result.findings if f.action == "reported")
    again = migrate(table, migrated)
    assert again.status == "unchanged" and not [f for f in again.findings if f.action == "rewritten"]

    original_path, migrated_path = tmp_path / "train_cuda.py", tmp_path / "train_npu.py"
    original_path.write_text(TRAIN_SCRIPT)
    migrated_path.write_text(migrated)
    with kernels.emulate_cuda():
        expected_losses = runpy.run_path(str(original_path), run_name="train_cuda")["main"](["--steps", "3"])
    with kernels.emulate() as active:
        if not active:
            pytest.skip("a real torch_npu is installed; the emulator stays off")
        losses = runpy.run_path(str(migrated_path), run_name="train_npu")["main"](["--steps", "3"])
    assert losses == pytest.approx(expected_losses, rel=1e-6)
    assert losses[-1] < losses[0]


NEW_CODES = ["NPU113", "NPU114", "NPU115", "NPU116", "NPU117", "NPU118", "NPU119", "NPU206", "NPU207", "NPU208"]


@pytest.mark.parametrize("code", NEW_CODES)
def test_every_cuda_only_and_device_path_code_has_its_three_fixtures_and_a_planned_record(table, code):
    from pathlib import Path

    names = [p.name for p in (Path(__file__).parents[2] / "fixtures" / "rules").iterdir() if p.name.startswith(code)]
    assert any(n.endswith("_nochange") for n in names) and any(n.endswith("_aliased") for n in names), names
    assert any(not n.endswith(("_nochange", "_aliased")) for n in names), names
    records = [r for r in table.records() if r.code == code]
    assert records and all(r.fallback is not None and r.fallback.detail for r in records), code
