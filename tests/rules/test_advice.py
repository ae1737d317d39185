"""NPU4xx codes are opt-in (DESIGN: "NPU4xx opt-in/noisy"): a run emits them only when --select
names their group; the vendor's advice then comes back as notes with its plans, and the default
run is unchanged by them."""

import pytest

from npu_migrate.migrate.rules import code_enabled, select_rules
from npu_migrate.migrate.rules.device.advice import Advice
from npu_migrate.migrate.rules.unsupported.fused_optimizer import FUSED_OPS, npu_kernels
from tests import snippets

SOURCE = "import torch\nopt = torch.optim.AdamW(params)\nx = batch.cuda()\n"


@pytest.mark.parametrize("select, enabled", [(None, False), (["NPU"], False), (["NPU4"], True), (["NPU40"], True),
                                             (["NPU401"], True), (["NPU402"], False), (["NPU2", "NPU401"], True)])
def test_npu4xx_codes_are_enabled_only_when_selected_by_their_group(select, enabled):
    assert code_enabled("NPU401", select, None) is enabled
    assert (Advice in select_rules(select, None)) is (enabled or select == ["NPU402"])
    assert not code_enabled("NPU401", ["NPU4"], ["NPU401"])


@pytest.mark.slow
def test_the_default_run_has_no_advice_and_the_opt_in_run_adds_only_notes():
    default = snippets.migrate(SOURCE, "train.py")
    advised = snippets.migrate(SOURCE, "train.py", select=["NPU2", "NPU4"])
    assert not [f for f in default.findings if f.code.startswith("NPU4")]
    assert advised.migrated == default.migrated  # notes change nothing
    notes = [(f.line, f.code, f.action) for f in advised.findings if f.code.startswith("NPU4")]
    assert notes == [(2, "NPU401", "reported"), (3, "NPU401", "reported")]
    assert all(f.fallback.detail for f in advised.findings if f.code == "NPU401")


def test_fused_optimizer_reads_the_npu_kernel_list():
    kernels = npu_kernels()
    assert {"_fused_adam_", "_fused_adamw_", "_fused_sgd_"} <= kernels and "_fused_adagrad_" not in kernels
    assert set(FUSED_OPS.values()) == {"_fused_adam_", "_fused_adamw_", "_fused_sgd_", "_fused_adagrad_"}
