import pytest
import torch
import torch.nn.functional as F

from npu_migrate.migrate.parity.coverage import OpTrace, falls_back

aten = torch.ops.aten


def test_fallback_rule():
    assert falls_back(aten.digamma.default)  # no NPU kernel, CPU/CUDA kernels only
    assert not falls_back(aten.add.Tensor)  # in the NPU kernel list
    assert not falls_back(aten.expand.default)  # a view: CompositeExplicitAutograd, runs anywhere
    assert not falls_back(aten.cumprod.default)  # structured: calls cumprod.out, which the NPU has
    # what the CPU picks for F.scaled_dot_product_attention, which the NPU implements as a whole
    assert not falls_back(aten._scaled_dot_product_flash_attention_for_cpu.default)


def test_trace_counts_fallbacks_float64_and_fused_calls():
    trace = OpTrace()
    fused = trace.wrap_fused("npu_fake", lambda x: torch.digamma(x.double()).float())
    x = torch.rand(4) + 1
    with trace.recording():
        torch.digamma(x)
        torch.digamma(x)
        x.double().sum()
        fused(x)  # its insides are the NPU kernel's business
        q = torch.rand(1, 2, 4, 8)
        F.scaled_dot_product_attention(q, q, q)
    report = trace.to_json()
    assert report["fallback_ops"] == {"aten::digamma.default": 2}
    assert set(report["float64_ops"]) == {"aten::_to_copy.default", "aten::sum.default"}
    assert report["fused_npu_ops"] == {"npu_fake": 1}


def test_inference_mode_judges_the_ops_that_dispatch():
    """Under inference_mode composite ops reach the trace whole; they used to be listed as CPU
    fallbacks (aten::linear, reshape, to, einsum, rms_norm) though they decompose on a device."""
    linear, x = torch.nn.Linear(4, 4), torch.randn(2, 3, 4)

    def run():
        y = linear(x).reshape(6, 4).to(torch.float32)
        torch.einsum("ij,kj->ik", y, y)
        F.rms_norm(x, (4,))
        torch.digamma(x.abs() + 1)  # a real fallback stays one

    reports = []
    for mode in (torch.no_grad, torch.inference_mode):
        trace = OpTrace()
        with mode(), trace.recording():
            run()
        reports.append(trace.to_json())
    assert reports[0] == reports[1]
    assert reports[1]["fallback_ops"] == {"aten::digamma.default": 1}


@pytest.mark.slow
def test_higher_order_ops_pass_through_with_their_insides_traced():
    """Eager FlexAttention used to fail in the trace ("no rule registered for HigherOrderOperator")."""
    from torch.nn.attention.flex_attention import flex_attention

    q = torch.randn(1, 2, 16, 8)
    trace = OpTrace()
    with trace.recording():
        plain = flex_attention(q, q, q)
        flex_attention(q, q, q, score_mod=lambda score, b, h, i, j: score + torch.digamma(score.abs() + 1))
    torch.testing.assert_close(plain, F.scaled_dot_product_attention(q, q, q))
    report = trace.to_json()
    assert report["higher_order_ops"] == {"flex_attention": 2}
    assert report["fallback_ops"] == {"aten::digamma.default": 1}  # from the vmapped score_mod


def test_the_op_that_raised_is_the_innermost():
    trace = OpTrace()
    boom = trace.wrap_fused("npu_fake", lambda x: torch.mm(x, x))  # mm of a 1-D tensor raises inside
    with pytest.raises(RuntimeError), trace.recording():
        boom(torch.ones(3))
    assert trace.raised[0] == "npu_fake"  # the fused op the model called, not the aten op inside
    with pytest.raises(RuntimeError), trace.recording():
        torch.mm(torch.ones(3), torch.ones(3))
    assert trace.raised[0] == "aten::mm.default"


NPU_OP_SCRIPT = """
import pytest
import torch
from npu_migrate.migrate.parity.coverage import OpTrace

@torch.library.custom_op("npu::parity_probe_rms_norm", mutates_args=())
def probe(x: torch.Tensor) -> torch.Tensor:
    return torch.digamma(x)  # its insides are the kernel's business

trace = OpTrace()
with trace.recording():
    probe(torch.ones(3) + 1)
    torch.ops.npu.parity_probe_rms_norm(torch.ones(3))
print(trace.to_json())
"""


@pytest.mark.slow
def test_npu_dispatcher_ops_count_as_fused_kernels():
    """torch_npu registers its fused ops in the ``npu`` namespace; once the emulator does too,
    they must count as fused NPU kernels, never as fallbacks. (A subprocess: a test op must not
    enter the npu namespace of this process.)"""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", NPU_OP_SCRIPT], capture_output=True, text=True, check=True)
    report = eval(run.stdout.strip().splitlines()[-1])
    assert report["fused_npu_ops"] == {"parity_probe_rms_norm": 2}
    assert report["fallback_ops"] == {}
