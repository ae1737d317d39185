"""Hard models (``fixtures/parity/hard_models``), migrated by ``migrate run``, then compared: a
block compiled with torch.compile (inductor), FlexAttention eager and compiled, and two cases the
emulation cannot run, which must say "not supported" and why instead of crashing. Inductor
compiles on the CPU: about a minute for the module."""

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from npu_migrate.kernels import emulate_cuda
from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.cli import app
from npu_migrate.migrate.parity.precision import precision
from npu_migrate.migrate.parity.resolve import Resolver
from npu_migrate.migrate.parity.spec import load_spec
from npu_migrate.migrate.parity.worker import build

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "parity" / "hard_models"


@pytest.fixture(scope="module")
def hard_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("hard")
    shutil.copytree(FIXTURE, root / "tree", ignore=shutil.ignore_patterns("__pycache__"))
    migration = CliRunner().invoke(app, ["run", str(root / "tree"), "--out", str(root / "tree-npu"),
                                         "--report-dir", str(root / "report")])
    assert migration.exit_code == exitcodes.OK, migration.output
    out = root / "parity.json"
    result = CliRunner().invoke(app, ["parity", "--spec", str(root / "tree" / "parity.yaml"), "--json", str(out)])
    return result, {(c["name"], c["dtype"]): c for c in json.loads(out.read_text())["cases"]}


def test_compiled_and_flex_attention_models_run_on_both_sides(hard_run):
    """The original side used to fail inside inductor ("no attribute 'gcnArchName'") and the
    migrated side's op trace on FlexAttention ("no rule registered for HigherOrderOperator")."""
    _, cases = hard_run
    for key in (("compiled-mlp", "float32"), ("flex-attention", "float32"), ("flex-attention", "bfloat16"),
                ("compiled-flex-attention", "float32")):
        case = cases[key]
        assert case["passed"], (key, case["errors"])
    assert cases[("compiled-mlp", "float32")]["op_coverage"]["fused_npu_ops"] == {"npu_fusion_attention": 1}
    assert cases[("flex-attention", "float32")]["op_coverage"]["higher_order_ops"] == {"flex_attention": 1}


def test_what_the_emulation_cannot_run_is_not_supported_with_the_reason(hard_run):
    result, cases = hard_run
    train = cases[("flex-attention-train", "float32")]
    assert train["verdict"] == "not supported"
    assert train["errors"][0].startswith("original side: not supported (the training step (adamw-foreach) raised): "
                                         "NotImplementedError: "
                                         "FlexAttention does not support backward on CPU")
    graph = cases[("cuda-graph", "float32")]
    assert graph["verdict"] == "not supported" and "torch.cuda.graph is not emulated" in graph["errors"][0]
    assert graph["raised_in"]["at"] == "model.py:61 in forward"
    assert result.exit_code == exitcodes.PARITY_FAILED  # not a pass, but no setup error and no crash
    assert "NOT SUPPORTED" in result.stdout


def test_emulated_cuda_presents_what_inductor_reads():
    with emulate_cuda():
        props = torch.cuda.get_device_properties(0)
        assert props.gcnArchName == props.name and props.warp_size == 32 and props.multi_processor_count > 0
    assert not torch.cuda.is_available()  # restored


COMPLEX_MODEL = '''
import torch


class Rope(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        angles = torch.arange(3.0)[:, None] * torch.tensor([1.0, 0.5])
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles), persistent=False)
        self.register_buffer("positions", torch.arange(3))

    def forward(self, x):
        return self.proj(x)
'''


def test_casting_touches_only_floating_point_tensors(tmp_path):
    """``model.to(dtype)`` used to turn a complex freqs_cis real (its imaginary part lost)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "rope_model.py").write_text(COMPLEX_MODEL)
    spec = tree / "parity.yaml"
    spec.write_text("cases:\n  - {name: rope, factory: 'rope_model.py:Rope', inputs: {x: {shape: [2, 4]}}, dtypes: [bfloat16]}\n")
    (case,) = load_spec(spec).cases
    sys.path.insert(0, str(tree))
    try:
        model = build(case, precision("bfloat16"), Resolver.for_side("original", tree, tmp_path / "other", spec),
                      torch.device("cpu"))
    finally:
        sys.path.remove(str(tree))
        sys.modules.pop("rope_model", None)
    angles = torch.arange(3.0)[:, None] * torch.tensor([1.0, 0.5])
    assert model.freqs_cis.dtype == torch.complex64
    assert torch.equal(model.freqs_cis, torch.polar(torch.ones_like(angles), angles))
    assert model.positions.dtype == torch.int64 and model.proj.weight.dtype == torch.bfloat16
