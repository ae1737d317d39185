"""Parity runs of a spec kept outside both trees (``fixtures/parity/harness``): the harness beside
the spec, AMP cases and local checkpoints, between the tiny Llama fixture and its migration by
``migrate run``. One parity run (two worker processes) for the module."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.cli import app
from npu_migrate.migrate.parity.checkpoint import CheckpointError, load_checkpoint, load_strictly, read_checkpoint

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "parity"
SCALE = 10.0  # the checkpoints' lm_head is the random init times this: loading them shows in the logits


def write_checkpoints(folder: Path, tree: Path) -> None:
    """A HF-style directory, a trainer's torch.save file and a misfit, from the original's model."""
    import sys

    from safetensors.torch import save_file

    sys.path.insert(0, str(tree))
    try:
        from tinyllama.model import Config, TinyLlama

        torch.manual_seed(0)
        state = TinyLlama(Config(num_layers=1, hidden_size=32, intermediate_size=64)).state_dict()
    finally:
        sys.path.remove(str(tree))
        for name in [m for m in sys.modules if m == "tinyllama" or m.startswith("tinyllama.")]:
            del sys.modules[name]
    state = {k: v.clone() for k, v in state.items()}
    state["lm_head.weight"] *= SCALE
    (folder / "hf").mkdir(parents=True)
    save_file(state, str(folder / "hf" / "model.safetensors"))
    torch.save({"state_dict": state, "epoch": 3}, folder / "trainer.pt")
    save_file({**state, "extra.weight": torch.zeros(2)}, str(folder / "misfit.safetensors"))


@pytest.fixture(scope="module")
def harness_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("harness")
    shutil.copytree(FIXTURES / "tiny_llama", root / "tree", ignore=shutil.ignore_patterns("parity.yaml", "__pycache__"))
    migration = CliRunner().invoke(app, ["run", str(root / "tree"), "--out", str(root / "tree-npu"),
                                         "--report-dir", str(root / "report")])
    assert migration.exit_code == exitcodes.OK, migration.output
    spec_dir = root / "spec"
    shutil.copytree(FIXTURES / "harness", spec_dir, ignore=shutil.ignore_patterns("__pycache__"))
    write_checkpoints(spec_dir / "checkpoints", root / "tree")
    out = root / "parity.json"
    result = CliRunner().invoke(app, ["parity", "--spec", str(spec_dir / "parity.yaml"), "--original", str(root / "tree"),
                                      "--json", str(out)])
    report = json.loads(out.read_text())
    return result, {(c["name"], c["dtype"]): c for c in report["cases"]}


def test_harness_beside_the_spec_runs_each_trees_own_model(harness_run):
    """Used to fail with "harness.py not found in .../tree": harness files had to be copied into the repo."""
    _, cases = harness_run
    for dtype in ("float32", "bfloat16"):
        case = cases[("harness", dtype)]
        assert case["passed"], case["errors"]
        # the migrated side ran the migrated tree's code: its fused kernels
        assert {"npu_rms_norm", "npu_swiglu"} <= set(case["op_coverage"]["fused_npu_ops"])


def test_amp_runs_float32_weights_under_autocast(harness_run):
    _, cases = harness_run
    for dtype, label in (("bfloat16", "amp-bfloat16"), ("float16", "amp-float16")):
        case = cases[("amp" if dtype == "bfloat16" else "amp-scaled", label)]
        assert case["passed"], case["errors"] or [t for t in case["outputs"] + case["gradients"] if not t["passed"]]
        assert [o["dtype"] for o in case["outputs"]] == [dtype]  # the logits came out of autocast
        grads = [g for g in case["gradients"] if g["name"] != "loss"]
        assert grads and {g["dtype"] for g in grads} == {"float32"}  # float32 weights
        assert case["criteria"]["cosine"] == 0.999  # judged by the autocast dtype's criteria
        assert case["after_step"][0]["passed"]


def test_checkpoints_are_loaded_into_both_sides(harness_run):
    _, cases = harness_run
    random = cases[("harness", "float32")]["outputs"][0]["max_abs_value"]
    for key in (("checkpoint-dir", "float32"), ("checkpoint-file", "bfloat16")):
        case = cases[key]
        assert case["passed"], case["errors"]
        # the checkpoint's lm_head is SCALE times the random one: so are the logits, on both sides
        assert case["outputs"][0]["max_abs_value"] == pytest.approx(SCALE * random, rel=0.05)


def test_a_checkpoint_that_does_not_fit_is_a_setup_error(harness_run):
    result, cases = harness_run
    case = cases[("checkpoint-misfit", "float32")]
    assert case["verdict"] == "setup error"
    assert "do not fit the original model: not in the model (1): extra.weight" in case["errors"][0]
    assert result.exit_code == exitcodes.PARITY_FAILED | exitcodes.CONFIG_ERROR


def test_strict_loading_allows_tied_weights_and_names_misfits(tmp_path):
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(4, 3)
            self.head = torch.nn.Linear(3, 4, bias=False)
            self.head.weight = self.embed.weight

    model = Tied()
    state = {"embed.weight": torch.ones(4, 3)}  # a HF save leaves the tied head out
    load_strictly(model, state, tmp_path)
    assert torch.equal(model.head.weight, torch.ones(4, 3))
    with pytest.raises(CheckpointError, match=r"shape mismatch \(1\): embed.weight: checkpoint \(4, 2\), model \(4, 3\)"):
        load_strictly(model, {"embed.weight": torch.ones(4, 2)}, tmp_path)
    untied = torch.nn.Linear(3, 4)
    with pytest.raises(CheckpointError, match=r"missing in the checkpoint \(1\): bias"):
        load_strictly(untied, {"weight": torch.ones(4, 3)}, tmp_path)


def test_a_hugging_face_directory_loads_with_transformers_own_conversions(tmp_path):
    """transformers 5 saves Mixtral's experts per expert (block_sparse_moe.experts.N.w1) and fuses them
    on load: read as saved, the names do not fit; through from_pretrained they do, strictly."""
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                           num_attention_heads=2, num_key_value_heads=1, num_local_experts=4,
                           num_experts_per_tok=2, max_position_embeddings=32)
    torch.manual_seed(1)
    saved = MixtralForCausalLM(config)
    saved.save_pretrained(tmp_path / "ckpt")
    torch.manual_seed(0)
    fresh = MixtralForCausalLM(config)
    with pytest.raises(CheckpointError, match="missing in the checkpoint"):
        load_strictly(fresh, read_checkpoint(tmp_path / "ckpt"), tmp_path / "ckpt")
    load_checkpoint(fresh, tmp_path / "ckpt")
    want = saved.state_dict()
    assert all(torch.equal(tensor, want[name]) for name, tensor in fresh.state_dict().items())
    smaller = MixtralForCausalLM(MixtralConfig(**{**config.to_dict(), "num_hidden_layers": 2}))
    with pytest.raises(CheckpointError, match="missing in the checkpoint"):  # a second layer the checkpoint lacks
        load_checkpoint(smaller, tmp_path / "ckpt")


def test_sharded_checkpoint_directory(tmp_path):
    from safetensors.torch import save_file

    save_file({"a": torch.ones(2)}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({"b": torch.zeros(3)}, str(tmp_path / "model-00002-of-00002.safetensors"))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    state = read_checkpoint(tmp_path)
    assert sorted(state) == ["a", "b"] and torch.equal(state["b"], torch.zeros(3))


def test_checkpoint_files_that_hold_no_weights_are_refused(tmp_path):
    torch.save({"epoch": 3, "lr": 0.1}, tmp_path / "no-state.pt")
    with pytest.raises(CheckpointError, match="holds no state_dict"):
        read_checkpoint(tmp_path / "no-state.pt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="holds no checkpoint: looked for model.safetensors.index.json"):
        read_checkpoint(tmp_path / "empty")
    (tmp_path / "sharded").mkdir()
    (tmp_path / "sharded" / "model.safetensors.index.json").write_text('{"weight_map": {"w": "../escape.safetensors"}}')
    with pytest.raises(CheckpointError, match="lies outside"):
        read_checkpoint(tmp_path / "sharded")
