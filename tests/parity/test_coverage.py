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
