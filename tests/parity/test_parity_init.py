"""`migrate parity init` on repositories with no harness: the nanoGPT fixture (a dataclass config,
a flag that switches between two attention sites), a package whose ``__init__`` needs a package that
is not installed and whose model is built from argparse options, an HF-style config class (output
``logits``), and a constructor argument nothing tells, which must stop `migrate parity` at its TODO."""

import json
import shutil
from pathlib import Path

import libcst as cst
import torch
import pytest
import yaml
from typer.testing import CliRunner

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.cli import app
from npu_migrate.migrate.parity.init import InitError, init_parity
from npu_migrate.migrate.parity.init.harness import Padded
from npu_migrate.migrate.parity.init.inputs import _FirstCall
from npu_migrate.migrate.parity.init.masks import mask_style
from npu_migrate.migrate.parity.init.sizes import NOTHING, choose, group, keep_divisions
from npu_migrate.migrate.parity.init.source import Function

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def migrate(tmp_path: Path, source: Path, *extra: str) -> Path:
    tree = tmp_path / source.name
    shutil.copytree(source, tree, ignore=shutil.ignore_patterns("__pycache__", "parity.yaml"))
    result = CliRunner().invoke(app, ["run", str(tree), "--report-dir", str(tmp_path / "report"), "--no-cache",
                                      "-j", "1", *extra])
    assert result.exit_code == exitcodes.OK, result.output
    return tree


def cases(report: Path) -> dict:
    return {c["name"]: c for c in yaml.safe_load((report / "parity.yaml").read_text())["cases"]}


def test_sizes_keep_the_code_s_ratios():
    chosen = choose({"n_embd": 4096, "n_head": 32, "n_kv_heads": 8, "intermediate_size": 11008, "vocab_size": 50257,
                     "pad_token_id": 50256, "enc_depth": None, "dropout": 0.1, "rotary_dim": 64, "head_dim": 128})
    assert chosen["n_embd"] % chosen["n_head"] == 0 and chosen["n_head"] % chosen["n_kv_heads"] == 0
    assert chosen["intermediate_size"] == 176  # 11008 / 4096 of the width, rounded up to a multiple of 8
    assert chosen["pad_token_id"] < chosen["vocab_size"]
    assert chosen["rotary_dim"] == chosen["head_dim"] // 2  # the default's share of a head
    assert "dropout" not in chosen and group("enc_depth") == "layers"
    # required: an N-d model's dims (images), its input shape, a frequency bound; with a default: kept
    required = choose({"ndim": NOTHING, "input_shape": NOTHING, "max_freq": NOTHING, "input_axis": 3, "theta": 1e4})
    assert required == {"ndim": 2, "input_shape": 32, "max_freq": 10.0}
    values = {"dim": 64, "heads": 6}
    keep_divisions(values, [("dim", "heads")])
    assert values["dim"] == 66


def test_nanogpt_spec_runs_both_attention_sites(tmp_path):
    tree = migrate(tmp_path, FIXTURES / "models" / "nanogpt", "--parity-init")
    written = cases(tmp_path / "report")
    assert set(written) == {"GPT", "GPT-amp", "GPT-train", "GPT-flash-false"}
    assert written["GPT"]["kwargs"]["config"]["n_embd"] == 64
    assert written["GPT"]["inputs"] == {"idx": {"shape": [2, 16], "dtype": "int64", "high": 128}}
    assert written["GPT-flash-false"]["kwargs"]["config"]["flash"] is False
    assert not list(tree.rglob("parity_harness.py")) and not list(tree.with_name("nanogpt-npu").rglob("parity_harness.py"))
    out = tmp_path / "parity.json"
    result = CliRunner().invoke(app, ["parity", "--spec", str(tmp_path / "report" / "parity.yaml"), "--json", str(out)])
    assert result.exit_code == exitcodes.OK, result.output
    runs = json.loads(out.read_text())["cases"]
    assert all(c["passed"] for c in runs)
    # the flash case runs the SDPA site, the flash=False case the hand-written attention; both fused
    fused = {c["name"]: c["op_coverage"]["fused_npu_ops"].get("npu_fusion_attention", 0) for c in runs}
    assert fused["GPT"] and fused["GPT-flash-false"]
    # parity's per-site record: every rewritten site took its fused path in some run
    assert {s["status"] for s in json.loads(out.read_text())["sites"]} == {"proven"}


def test_a_package_built_from_argparse_options_with_an_unimportable_init(tmp_path):
    migrate(tmp_path, FIXTURES / "parity" / "init_package" / "tinylm")
    result = CliRunner().invoke(app, ["parity", "init", str(tmp_path / "tinylm"), "--report-dir", str(tmp_path / "report")])
    assert result.exit_code == exitcodes.OK, result.output
    written = cases(tmp_path / "report")
    assert written["TinyLM"]["kwargs"]["config"] == {"dim": 64, "n_heads": 4, "vocab_size": 128, "n_layers": 2,
                                                     "norm_eps": 1e-05}  # add_argument defaults, shrunk
    parity = CliRunner().invoke(app, ["parity", "--spec", str(tmp_path / "report" / "parity.yaml")])
    assert parity.exit_code == exitcodes.OK, parity.output


def test_a_config_class_model_compares_its_logits(tmp_path):
    migrate(tmp_path, FIXTURES / "models" / "llama_gqa")
    result = init_parity(tmp_path / "llama_gqa", tmp_path / "llama_gqa-npu", tmp_path / "report")
    written = cases(tmp_path / "report")
    case = written["LlamaForCausalLM"]
    assert case["output"] == "logits" and case["kwargs"]["config"]["num_key_value_heads"] == 2
    assert not result.unreached and not result.todos
    assert "tree_module('configuration_llama.py', PACKAGE).LlamaConfig(**config)" in result.harness.read_text()


def test_what_cannot_be_inferred_is_a_todo_that_stops_parity_with_its_message(tmp_path):
    migrate(tmp_path, FIXTURES / "parity" / "init_todo", "--parity-init")
    spec = tmp_path / "report" / "parity.yaml"
    assert "TODO: constructor argument 'd_state' of Mixer (model.py:10) (used at model.py:14)" in spec.read_text()
    result = CliRunner().invoke(app, ["parity", "--spec", str(spec)])
    assert result.exit_code == exitcodes.CONFIG_ERROR
    assert f"{spec}:" in result.output and "TODO: constructor argument 'd_state' of Mixer" in result.output
    assert "Traceback" not in result.output


def test_never_written_into_a_tree_and_needs_the_report(tmp_path):
    tree = migrate(tmp_path, FIXTURES / "parity" / "init_todo")
    with pytest.raises(InitError, match="into the original tree"):
        init_parity(tree, tree.with_name("init_todo-npu"), tree / "reports")
    with pytest.raises(InitError, match="run `migrate run"):
        init_parity(tree, tree.with_name("init_todo-npu"), tmp_path / "elsewhere")


def test_a_model_put_together_by_a_builder_function(tmp_path):
    """The attention class takes its projections as arguments: the case builds the model with the
    tree's ``decoder(...)`` (whose arguments are sized by name), which runs its site."""
    migrate(tmp_path, FIXTURES / "parity" / "init_builder", "--parity-init")
    written = cases(tmp_path / "report")
    assert written["decoder"]["kwargs"] == {"vocab_size": 128, "embed_dim": 64, "num_heads": 4, "num_layers": 2}
    assert written["decoder"]["inputs"] == {"tokens": {"shape": [2, 16], "dtype": "int64", "high": 128}}
    assert "SelfAttention" not in written
    parity = CliRunner().invoke(app, ["parity", "--spec", str(tmp_path / "report" / "parity.yaml")])
    assert parity.exit_code == exitcodes.OK, parity.output


def test_a_kv_cache_decoder_gets_a_decode_case_and_a_left_padded_case(tmp_path):
    migrate(tmp_path, FIXTURES / "parity" / "init_decode", "--parity-init")
    written = cases(tmp_path / "report")
    assert set(written) == {"Decoder", "Decoder-amp", "Decoder-train", "Decoder-decode", "Decoder-padded"}
    assert written["Decoder-amp"]["train"] is True and written["Decoder-padded"]["train"] is True  # projection loss
    assert "attention_mask" not in written["Decoder-padded"]["inputs"]  # the harness passes the padded mask
    harness = (tmp_path / "report" / "parity_harness.py").read_text()
    assert "Decode(build_Decoder(config, **kwargs), 'hf', 'input_ids')" in harness
    assert "Padded(build_Decoder(config, **kwargs), 'input_ids', 'attention_mask', 'keep')" in harness
    out = tmp_path / "parity.json"
    result = CliRunner().invoke(app, ["parity", "--spec", str(tmp_path / "report" / "parity.yaml"), "--json", str(out)])
    assert result.exit_code == exitcodes.OK, result.output
    parity = json.loads(out.read_text())
    runs = {(c["name"], c["dtype"]): c for c in parity["cases"]}
    # the prefill and the decode step each ran the fused attention, in both dtypes
    for dtype in ("float32", "bfloat16"):
        assert runs[("Decoder-decode", dtype)]["sites"]["model.py:40:NPU302"]["fused"] >= 4
    # the left-padded batch reached the site with its mask: the rows that mask every key (the padding
    # queries of a causal model) take the original path, the others the fused one
    padded = runs[("Decoder-padded", "float32")]["sites"]["model.py:40:NPU302"]
    assert padded["fused"] > 0 and padded["fallbacks"]
    assert {s["status"] for s in parity["sites"]} == {"proven"}


def _forward(body: str) -> Function:
    node = cst.parse_module(f"def forward(self, x, mask=None, attention_mask=None, key_padding_mask=None):\n{body}").body[0]
    return Function("forward", node, "m.py", 1, 3)


@pytest.mark.parametrize("body, name, style", [
    ("    return x.masked_fill(~mask, 0)\n", "mask", "bool"),
    ("    return x.masked_fill(attention_mask, 0)\n", "attention_mask", "pad"),
    ("    return x + attention_mask\n", "attention_mask", "additive"),
    ("    return x * (1.0 - attention_mask[:, None, None, :])\n", "attention_mask", "keep"),
    ("    return x\n", "key_padding_mask", "pad"),
    ("    return x\n", "mask", "bool"),
    ('    """mask (Tensor): True where query i attends to key j, shape ``[b x s x s]``."""\n    return x\n', "mask",
     "square"),
])
def test_the_mask_style_is_read_from_the_forward(body, name, style):
    assert mask_style(_forward(body), name) == style


def test_a_model_with_a_todo_whose_sites_others_run_is_left_out(tmp_path):
    """``Tagger`` needs a ``scorer`` nothing tells, but ``Encoder`` runs its site: the spec has no
    TODO, names the tagger in its header, and the encoder's ``**kwargs`` bring ``Block``'s arguments
    less ``causal``, which the encoder passes itself."""
    migrate(tmp_path, FIXTURES / "parity" / "init_covered", "--parity-init")
    spec = (tmp_path / "report" / "parity.yaml").read_text()
    assert "# not written: Tagger (model.py:42)" in spec and "constructor argument 'scorer' of Tagger" in spec
    written = cases(tmp_path / "report")
    assert set(written) == {"Encoder", "Encoder-amp", "Encoder-train"}
    assert written["Encoder"]["kwargs"] == {"num_tokens": 128, "dim": 64, "depth": 2, "heads": 4}
    out = tmp_path / "parity.json"
    result = CliRunner().invoke(app, ["parity", "--spec", str(tmp_path / "report" / "parity.yaml"), "--json", str(out)])
    assert result.exit_code == exitcodes.OK, result.output
    assert {s["status"] for s in json.loads(out.read_text())["sites"]} == {"proven"}


def test_the_rank_of_a_starred_shape_comes_from_the_assert_on_it():
    """``b, *axis, _ = *data.shape, ...`` with ``assert len(axis) == self.input_axis`` (Perceiver)."""
    forward = cst.parse_module("def forward(self, data):\n    b, *axis, _, device = *data.shape, data.device\n"
                               "    assert len(axis) == self.input_axis\n"
                               "    data = rearrange(data, 'b ... d -> b (...) d')\n").body[0]
    use = _FirstCall("data")
    forward.body.visit(use)
    assert use.rank_of({"input_axis": 3}) == 5 and use.rank_of({}) is None


class _Echo(torch.nn.Module):
    """Returns its ids as features and keeps the mask it was given."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1, dtype=torch.bfloat16))

    def forward(self, input_ids, attention_mask=None):
        self.given = attention_mask
        return input_ids.float()[..., None] + 1


@pytest.mark.parametrize("style, first_row", [
    ("keep", [0, 0, 0, 0, 1, 1]), ("bool", [False] * 4 + [True] * 2), ("pad", [True] * 4 + [False] * 2),
])
def test_the_padded_case_left_pads_the_first_row_in_the_mask_style(style, first_row):
    padded = Padded(_Echo(), "input_ids", "attention_mask", style)
    out = padded(input_ids=torch.ones(2, 6, dtype=torch.long))
    mask = padded.model.given
    assert mask[0].tolist() == first_row and mask[1].tolist() == [first_row[-1]] * 6
    assert out[0, :4].abs().sum() == 0 and (out[0, 4:] == 2).all() and (out[1] == 2).all()  # padded rows zeroed


def test_the_padded_case_builds_additive_and_query_by_key_masks():
    additive = Padded(_Echo(), "input_ids", "attention_mask", "additive")
    additive(input_ids=torch.ones(2, 6, dtype=torch.long))
    mask = additive.model.given
    assert mask.shape == (2, 1, 1, 6) and mask.dtype == torch.bfloat16  # the model's dtype
    assert (mask[0, 0, 0, :4] == torch.finfo(torch.bfloat16).min).all() and (mask[0, 0, 0, 4:] == 0).all()
    square = Padded(_Echo(), "input_ids", "attention_mask", "square")
    square(input_ids=torch.ones(2, 6, dtype=torch.long))
    mask = square.model.given
    assert mask.shape == (2, 6, 6) and mask[1].equal(torch.ones(6, 6, dtype=torch.bool).tril())
    assert mask[0].sum(-1).min() >= 1 and not mask[0, 5, :4].any()  # every query attends; padded keys masked


def test_a_package_not_installed_here_gets_a_stand_in(tmp_path, monkeypatch):
    """A tree file importing a package that cannot be installed here (xformers, torchaudio) is imported
    with an empty stand-in for it; torch and the tree's own modules never are."""
    from npu_migrate.migrate.parity.init import harness

    (tmp_path / "model.py").write_text("import npu_missing_pkg.ops as ops\nfrom npu_missing_other import Bias\n\n"
                                       "class Model:\n    bias = Bias\n")
    (tmp_path / "broken.py").write_text("import helpers_of_the_tree\n")
    monkeypatch.setattr(harness, "TREE", tmp_path)
    monkeypatch.setattr(harness, "STAND_INS", harness._StandIns())
    monkeypatch.setattr("sys.path", [str(tmp_path), *__import__("sys").path])
    (tmp_path / "helpers_of_the_tree.py").write_text("import torch.not_a_module\n")
    try:
        module = harness.tree_module("model.py")
        assert isinstance(module.Model.bias, type) and module.Model.bias.__module__ == "npu_missing_other"
        assert harness.STAND_INS.tops == ["npu_missing_pkg", "npu_missing_other"]
        with pytest.raises(ModuleNotFoundError, match="torch.not_a_module"):
            harness.tree_module("broken.py")
    finally:
        import sys
        for name in [n for n in sys.modules if n.split(".")[0] in ("model", "broken", "helpers_of_the_tree",
                                                                   "npu_missing_pkg", "npu_missing_other")]:
            del sys.modules[name]
        if harness.STAND_INS in sys.meta_path:
            sys.meta_path.remove(harness.STAND_INS)
