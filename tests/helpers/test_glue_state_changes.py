"""Migrated models stay equal to their originals through every way their parameters and buffers
change (issue 18): the demo repo, nanoGPT's explicit attention over a causal buffer and transformers'
llama and mixtral, each migrated by ``migrate run`` (``tests/helpers/migrated_models.py``), run under
the emulated NPU after each change of ``migrate parity``'s ``changes`` (``parity/changes.py``: ``.data``
and ``torch._foreach_*`` writes, ``load_state_dict``, ``nn.init``, ``set_``, tying, ``half()``,
parameter swaps, flat-tensor writes, buffer fills and ``.data`` writes) and after several AdamW steps
(foreach, fused, for-loop). Each change follows a forward, so whatever the helper would keep is
built first; the fused kernels must run after the change as before it."""

import pytest
import torch

from npu_migrate.migrate.parity.changes import CHANGES
from npu_migrate.migrate.parity.training import OPTIMIZERS, loss
from tests.helpers.migrated_models import migrated_models
from tests.helpers.support import assert_parity

pytestmark = pytest.mark.slow

pytest.importorskip("transformers")

MODELS = ["demo", "nanogpt", "llama", "mixtral"]
FUSED = ("npu_fusion_attention", "npu_rotary_mul", "npu_rms_norm", "npu_swiglu")
# the fused kernels each model runs, in inference and in training
KERNELS = {"demo": set(FUSED), "nanogpt": {"npu_fusion_attention"}, "llama": set(FUSED), "mixtral": set(FUSED)}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    with migrated_models(tmp_path_factory.mktemp("state")) as found:
        yield found


def logits(output):
    if isinstance(output, tuple):
        return output[0]
    return output.logits if hasattr(output, "logits") else output


def fused_calls(spy):
    return {op: spy[op] for op in FUSED if spy[op]}


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("model", MODELS)
def test_every_state_change(pairs, spy, model, change):
    pair = pairs[model]
    original, migrated = pair.build()
    inputs = pair.inputs()
    step = CHANGES[change]
    with torch.no_grad():
        for side in (original, migrated):
            if step.prepare is not None:
                step.prepare(side)
        torch.testing.assert_close(logits(migrated(**inputs)), logits(original(**inputs)))
        before = fused_calls(spy)
        spy.clear()
        applied = [step.apply(side) for side in (original, migrated)]
        assert applied[0] == applied[1]
        if not applied[0]:
            pytest.skip(f"{model} has nothing {change} applies to")
        want = logits(original(**inputs))
        got = logits(migrated(**inputs))
    assert_parity(got, want, torch.float32)
    assert set(before) >= KERNELS[model]
    assert fused_calls(spy) == before, "the fused kernels ran before the change, and after it alike"


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("model", MODELS)
def test_optimizer_steps(pairs, spy, model, optimizer):
    """Four steps on the projection loss; each step's loss and the outputs after the last agree."""
    pair = pairs[model]
    inputs = pair.inputs()
    trace = []
    for side in pair.build():
        side.train()
        step = OPTIMIZERS[optimizer](side.parameters(), 1e-2)
        losses = []
        for _ in range(4):
            step.zero_grad()
            value = loss(logits(side(**inputs)), "projection")
            value.backward()
            step.step()
            losses.append(value.detach())
        side.eval()
        with torch.no_grad():
            trace.append((torch.stack(losses), logits(side(**inputs))))
    (want_losses, want), (got_losses, got) = trace
    assert_parity(got_losses, want_losses, torch.float32)
    assert_parity(got, want, torch.float32)
    assert set(fused_calls(spy)) >= KERNELS[model]
