"""NPU322 executed: the fixture's decoder layers migrated as a user migrates them (every norm code on)
run against the original on the emulated NPU, in the modes users run them: inference in float32,
bfloat16 and under autocast (a float32 residual stream plus bfloat16 outputs), training (the kernel
has no backward: the original statements run, the norm's own forward stays fused by NPU320), after
the weights change (.data writes, load_state_dict), and with a hook or a subclass that the guard
must send back to the original. Each case counts the npu_add_rms_norm calls it made."""

from pathlib import Path

import pytest
import torch

from tests import snippets
from tests.rules.emulated import counting, emulated_npu, load, tolerance, twins

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "rules" / "NPU322_add_rms_norm" / "input.py"
F32, BF16 = torch.float32, torch.bfloat16
OPS = ("npu_add_rms_norm", "npu_rms_norm")


@pytest.fixture(scope="module")
def npu():
    with emulated_npu() as torch_npu:
        yield torch_npu


@pytest.fixture(scope="module")
def layers(npu):
    source = FIXTURE.read_text()
    migrated = snippets.migrated(source, select=["NPU320", "NPU321", "NPU322"])
    assert migrated.count("npu_glue.add_rms_norm(") == 3
    return load(source), load(migrated)


def sample(*shape, dtype=F32, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def run(model, name, x):
    return model(x) if name == "DecoderLayer" else model(x, sample(*x.shape, dtype=x.dtype, seed=7))


def close(got, want, dtype):
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.float(), want.float(), **tolerance("npu_add_rms_norm", dtype))


@pytest.mark.parametrize("name,sites", [("DecoderLayer", 1), ("Block", 2)])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["f32", "bf16"])
def test_inference_runs_the_fused_kernel_and_matches(layers, npu, name, sites, dtype):
    before, after = twins(*layers, name, 16, dtype=dtype)
    x = sample(2, 5, 16, dtype=dtype)
    with torch.no_grad():
        want = run(before, name, x)
        with counting(npu, *OPS) as calls:
            got = run(after, name, x)
    close(got, want, dtype)
    assert calls["npu_add_rms_norm"] == sites


def test_autocast_residual_stream_fuses_in_float32(layers, npu):
    """Under autocast the linear layers return bfloat16 and the residual stays float32: the sum is
    float32, as is the weight, so the kernel runs on the promoted inputs."""
    before, after = twins(*layers, "DecoderLayer", 16)
    x = sample(2, 5, 16)
    with torch.no_grad(), torch.autocast("cpu", dtype=BF16):
        want = before(x)
        with counting(npu, *OPS) as calls:
            got = after(x)
    close(got, want, F32)
    assert calls["npu_add_rms_norm"] == 1


def test_training_runs_the_original_statements_with_the_norm_fused(layers, npu):
    """No backward for npu_add_rms_norm: with gradients the add and the norm module run as written
    (the module's forward on npu_rms_norm), and several AdamW steps stay with the original."""
    before, after = twins(*layers, "DecoderLayer", 16)
    optimisers = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (before, after)]
    with counting(npu, *OPS) as calls:
        for step in range(3):
            x = sample(4, 16, seed=10 + step)
            for model, optimiser in zip((before, after), optimisers):
                optimiser.zero_grad()
                model(x).square().mean().backward()
                optimiser.step()
    assert calls["npu_add_rms_norm"] == 0 and calls["npu_rms_norm"] > 0
    for want, got in zip(before.parameters(), after.parameters()):
        torch.testing.assert_close(got, want, **tolerance("npu_rms_norm", F32))


def test_changed_weights_are_read_on_every_call(layers, npu):
    before, after = twins(*layers, "DecoderLayer", 16)
    x = sample(2, 3, 16)
    with torch.no_grad():
        for model in (before, after):
            model.post_attention_layernorm.weight.data.mul_(3.0)
        close(after(x), before(x), F32)
        state = {k: v * 0.5 for k, v in before.state_dict().items()}
        before.load_state_dict(state)
        after.load_state_dict(state)
        with counting(npu, *OPS) as calls:
            got = after(x)
        close(got, before(x), F32)
    assert calls["npu_add_rms_norm"] == 1


def test_a_hooked_or_subclassed_norm_runs_the_original(layers, npu):
    """The guard proves the module's call is the forward that was read: a forward hook, or a
    subclass (which may override forward), keeps the original statements."""
    original, migrated = layers
    before, after = twins(*layers, "DecoderLayer", 16)
    x = sample(2, 3, 16)
    seen = []
    after.post_attention_layernorm.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    before.post_attention_layernorm.register_forward_hook(lambda module, args, out: None)
    with torch.no_grad(), counting(npu, *OPS) as calls:
        close(after(x), before(x), F32)
    assert calls["npu_add_rms_norm"] == 0 and seen == [x.shape]

    class Doubled(migrated["RMSNorm"]):
        def forward(self, hidden_states):
            return 2 * super().forward(hidden_states)

    class DoubledBefore(original["RMSNorm"]):
        def forward(self, hidden_states):
            return 2 * super().forward(hidden_states)

    before, after = twins(*layers, "DecoderLayer", 16)
    before.post_attention_layernorm, after.post_attention_layernorm = DoubledBefore(16), Doubled(16)
    with torch.no_grad(), counting(npu, *OPS) as calls:
        close(after(x), before(x), F32)
    assert calls["npu_add_rms_norm"] == 0


def test_an_observer_hook_does_not_stop_the_fast_path(layers, npu):
    """A hook marked as an observer (migrate parity's recorder) only records: the kernel runs and
    the hook misses the norm's call; an unmarked hook keeps the original (above)."""
    before, after = twins(*layers, "DecoderLayer", 16)
    seen = []

    def observe(module, args, out):
        seen.append(out.shape)

    observe.npu_glue_observer = True
    after.post_attention_layernorm.register_forward_hook(observe)
    x = sample(2, 3, 16)
    with torch.no_grad(), counting(npu, *OPS) as calls:
        close(after(x), before(x), F32)
    assert calls["npu_add_rms_norm"] == 1 and seen == []


def test_a_broadcasting_add_runs_the_original(layers, npu):
    before, after = twins(*layers, "Block", 16)
    x, residual = sample(2, 3, 16), sample(16, seed=3)  # the add broadcasts: one shape is not the other's
    with torch.no_grad(), counting(npu, *OPS) as calls:
        close(after(x, residual), before(x, residual), F32)
    assert calls["npu_add_rms_norm"] == 1  # the final norm's add is of x's shape; the first add broadcasts
