"""Real code: migrate the installed Hugging Face ``transformers`` model directories of llama, gpt2,
bert, mixtral and t5 (on copies in a temporary directory), then prove the migration with
``migrate parity`` between the installed package and the migrated copy, in float32 and bfloat16.

The flow lives in ``fixtures/real_code/flow.py`` (shared with ``benchmarks/real_code_report.py``);
``migrate run`` and the parity run happen once per module. About 1-1.5 minutes in all, most of it
the two parity worker processes importing ``transformers`` and running ten tiny models.
"""

import pytest

from fixtures.real_code import flow

pytestmark = pytest.mark.slow

pytest.importorskip("transformers")

ATTENTION = ("eager_attention_forward", "NPU302", "torch_npu.npu_fusion_attention")
ROTARY = ("apply_rotary_pos_emb", "NPU310", "torch_npu.npu_rotary_mul")  # found twice: q and k
EXPERTS = ("MixtralExperts.forward", "NPU330", "torch_npu.npu_swiglu")  # gate_up(x).chunk(2)
# the gate of transformers' default experts path (grouped_mm), an _apply_gate of the class's own added
# after its last statement (the end of forward), where the finding points
EXPERTS_GATE = ("MixtralExperts.forward", "NPU330", "torch_npu.npu_swiglu")
ROUTER = ("MixtralTopKRouter.forward", "NPU340", "torch_npu.npu_moe_gating_top_k_softmax")
# the auxiliary load-balancing loss reads the probabilities: they come from the v2 kernel (not on the
# forward path parity runs, so its kernel is not expected to run there)
AUX_LOSS = ("load_balancing_loss_func", "NPU340", "torch_npu.npu_moe_gating_top_k_softmax_v2")
NOT_IN_FORWARD = {AUX_LOSS}

# family -> file -> the sites report.json must list: (function or method, code, target), target
# None for a site that is reported rather than rewritten. Read off the installed modeling files;
# `test_expected_sites_are_in_the_installed_code` checks that each named function still holds
# the code its rule looks for. Deliberately absent: activations that are not gated (GPT2MLP,
# BertIntermediate, T5DenseActDense).
EXPECTED = {
    "llama": {"modeling_llama.py": [
        ("LlamaRMSNorm.forward", "NPU320", "torch_npu.npu_rms_norm"),
        ("LlamaDecoderLayer.forward", "NPU322", "torch_npu.npu_add_rms_norm"),  # the add before the second norm
        ROTARY, ROTARY,
        ("LlamaMLP.forward", "NPU330", "torch_npu.npu_swiglu"),
        ATTENTION,
    ]},
    "gpt2": {"modeling_gpt2.py": [
        ATTENTION,
        # baddbmm(beta=0) scores in float32 on reshaped 3-D q/k (reorder_and_upcast_attn=True)
        ("GPT2Attention._upcast_and_reordered_attn", "NPU303", None),
    ]},
    "bert": {"modeling_bert.py": [ATTENTION]},
    "mixtral": {
        "modeling_mixtral.py": [
            EXPERTS, EXPERTS_GATE, ROUTER,
            ("MixtralRMSNorm.forward", "NPU320", "torch_npu.npu_rms_norm"),
            ("MixtralDecoderLayer.forward", "NPU322", "torch_npu.npu_add_rms_norm"),
            ROTARY, ROTARY, ATTENTION, AUX_LOSS,
        ],
        # the modular source the modeling file is generated from: only the classes it redefines
        "modular_mixtral.py": [EXPERTS, EXPERTS_GATE, ROUTER, AUX_LOSS],
    },
    "t5": {"modeling_t5.py": [
        ("T5LayerNorm.forward", "NPU320", "torch_npu.npu_rms_norm"),  # RMSNorm without mean subtraction
        ("T5DenseGatedActDense.forward", "NPU330", "torch_npu.npu_swiglu"),  # act(wi_0(x)) * wi_1(x) in 3 statements
        ("eager_attention_forward", "NPU303", None),  # relative position bias added to the scores
    ]},
}
# what each rule recognises, as text that must appear in the function named for it (one of "|")
MARKERS = {"NPU302": "softmax(", "NPU303": "position_bias|baddbmm(", "NPU310": "rotate_half(", "NPU320": "rsqrt(",
           "NPU322": "residual + hidden_states", "NPU330": "self.act", "NPU340": "topk("}
DTYPES = ("float32", "bfloat16")


@pytest.fixture(scope="module")
def migration(tmp_path_factory):
    return flow.migrate_transformers(tmp_path_factory.mktemp("real_code"))


@pytest.fixture(scope="module")
def parity(migration):
    report = flow.run_parity(migration).to_json()
    return {(case["name"], case["dtype"]): case for case in report["cases"]}


def expected_sites(family):
    return sorted((file, *site) for file, sites in EXPECTED[family].items() for site in sites)


def test_expected_sites_are_in_the_installed_code():
    models = flow.installed_transformers() / "models"
    for family, files in EXPECTED.items():
        for file, sites in files.items():
            path = models / family / file
            spans = {name: (first, last) for first, last, name in flow.definitions(path)}
            lines = path.read_text().splitlines()
            for where, code, _ in sites:
                assert where in spans, f"{path}: {where} is gone; update EXPECTED"
                first, last = spans[where]
                body = "\n".join(lines[first - 1:last])
                assert any(marker in body for marker in MARKERS[code].split("|")), f"{path}: {where} changed; update EXPECTED"


def test_migrate_run_succeeds(migration):
    assert migration.exit_code == 0, migration.output
    assert migration.report["summary"]["files_errored"] == 0, migration.report["files"]


@pytest.mark.parametrize("family", flow.FAMILIES)
def test_sites_rewritten_and_reported(migration, family):
    sites = migration.sites(family)
    found = sorted((site.file, site.where, site.code, site.target) for site in sites)
    assert found == expected_sites(family), "\n".join(f"{s.path}:{s.line} {s.code} {s.message}" for s in sites)
    for site in sites:
        assert site.action == ("rewritten" if site.target else "reported"), site
        assert site.target is None or site.target.startswith("torch_npu."), site


def test_t5_position_bias_attention_is_reported(migration):
    attention = [site for site in migration.sites("t5") if site.where == "eager_attention_forward"]
    assert [(site.code, site.action, site.target) for site in attention] == [("NPU303", "reported", None)]
    assert "position_bias" in attention[0].message


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", flow.FAMILIES)
def test_parity(parity, family, dtype):
    case = parity[family, dtype]
    assert case["passed"], (case["errors"], case["weight_problems"], case["first_divergent_module"])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", flow.FAMILIES)
def test_fused_kernels_run(parity, family, dtype):
    """Every kernel the rewrites target really ran in the parity run: no guard fell back."""
    targets = {target.removeprefix("torch_npu.") for _, where, code, target in expected_sites(family)
               if target and (where, code, target) not in NOT_IN_FORWARD}
    assert set(flow.fused_ops(parity[family, dtype])) == targets
