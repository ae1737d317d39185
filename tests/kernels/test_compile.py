"""``torch.compile(fullgraph=True)`` over code that calls the emulated torch_npu ops.

Each ``torch_npu.<op>`` is one dispatcher op with a fake kernel, so dynamo records it as a single
graph node (no graph break) and AOTAutograd traces its backward op too. Checked with the eager and
aot_eager backends, forward and backward, and with inductor (CPU) where a C++ compiler exists.
"""

from __future__ import annotations

import math
import shutil

import pytest
import torch

from npu_migrate import kernels
from tests.kernels.attention_ref import compressed

pytestmark = pytest.mark.slow

B, S, H, N = 2, 16, 32, 2


@pytest.fixture(scope="module")
def torch_npu():
    with kernels.emulate():
        import torch_npu

        yield torch_npu


def decoder_block(torch_npu, x, weight, cos, sin, gate_up, causal):
    """RMSNorm -> rotary -> causal fused attention -> SwiGLU, all through torch_npu. (The mask comes
    in from outside: under the emulation, FX cannot yet generate code for a graph that creates a
    tensor on an explicit device, see kernels.device's torch.device stand-in.)"""
    h = torch_npu.npu_rms_norm(x, weight, epsilon=1e-6)[0]
    q = h.view(B, S, N, H // N).transpose(1, 2)
    q = torch_npu.npu_rotary_mul(q, cos, sin)
    attn = torch_npu.npu_fusion_attention(q, q, q, N, "BNSD", atten_mask=causal, sparse_mode=2,
                                          scale=1 / math.sqrt(H // N))[0]
    return torch_npu.npu_swiglu(attn.transpose(1, 2).reshape(B, S, H) @ gate_up, dim=-1)


def router(torch_npu, hidden, weight):
    weights, experts, rows = torch_npu.npu_moe_gating_top_k_softmax(hidden @ weight, None, 2)
    return weights / weights.sum(-1, keepdim=True), experts


def inputs(grad):
    gen = torch.Generator().manual_seed(0)
    make = lambda *shape: torch.randn(*shape, generator=gen).requires_grad_(grad)  # noqa: E731
    angles = torch.randn(1, 1, S, H // N, generator=gen)
    return make(B, S, H), make(H), angles.cos(), angles.sin(), make(H, 2 * H), compressed()


def compiled_matches_eager(torch_npu, backend):
    args = inputs(grad=True)
    eager = decoder_block(torch_npu, *args)
    eager_grads = torch.autograd.grad(eager.sum(), [a for a in args if a.requires_grad])
    torch._dynamo.reset()
    block = torch.compile(lambda *a: decoder_block(torch_npu, *a), fullgraph=True, backend=backend)
    out = block(*args)
    grads = torch.autograd.grad(out.sum(), [a for a in args if a.requires_grad])
    torch.testing.assert_close(out, eager)
    for got, want in zip(grads, eager_grads):
        torch.testing.assert_close(got, want)

    with torch.no_grad():
        hidden, weight = torch.randn(B, S, H), torch.randn(H, 8)
        route = torch.compile(lambda h, w: router(torch_npu, h, w), fullgraph=True, backend=backend)
        got, want = route(hidden, weight), router(torch_npu, hidden, weight)
        torch.testing.assert_close(got[0], want[0])
        assert torch.equal(got[1], want[1])


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_fullgraph_compile_forward_and_backward(torch_npu, backend):
    compiled_matches_eager(torch_npu, backend)


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="inductor on CPU needs a C++ compiler")
def test_fullgraph_compile_with_inductor(torch_npu):
    compiled_matches_eager(torch_npu, "inductor")


def test_each_op_is_one_graph_node(torch_npu):
    """Dynamo's graph holds the ops themselves, not the aten ops they are emulated with."""
    seen = []

    def backend(gm, example_inputs):
        seen.extend(str(node.target) for node in gm.graph.nodes if node.op == "call_function")
        return gm

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(lambda *a: decoder_block(torch_npu, *a), fullgraph=True, backend=backend)(*inputs(grad=False))
    npu_ops = [t for t in seen if t.startswith("npu.")]
    assert npu_ops == ["npu.npu_rms_norm", "npu.npu_rotary_mul", "npu.npu_fusion_attention", "npu.npu_swiglu"]
    assert not any("softmax" in t or "rsqrt" in t for t in seen)


def test_dropout_compiles_for_inference_and_refuses_traced_training(torch_npu):
    """The dropout seed is a Python int output (0 in the fake kernel, as in torch_npu's meta): an
    inference graph runs the real draw; a traced backward could not replay the mask, so it raises."""
    q = torch.randn(1, 2, 8, 16)

    def attention(q):
        return torch_npu.npu_fusion_attention(q, q, q, 2, "BNSD", keep_prob=0.8, scale=0.25)[0]

    torch._dynamo.reset()
    compiled = torch.compile(attention, fullgraph=True, backend="aot_eager")
    torch.manual_seed(3)
    out = compiled(q)
    torch.manual_seed(3)
    torch.testing.assert_close(out, attention(q))
    torch._dynamo.reset()
    with pytest.raises(Exception, match="cannot be traced for training"):
        torch.compile(attention, fullgraph=True, backend="aot_eager")(q.requires_grad_())


def test_shape_errors_surface_while_tracing(torch_npu):
    """The fake kernels run the real checks: a wrong head_num fails at compile time, as on an NPU."""
    q = torch.randn(1, 2, 8, 16)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="query has 2 heads but head_num=3"):
        torch.compile(lambda q: torch_npu.npu_fusion_attention(q, q, q, 3, "BNSD")[0], fullgraph=True,
                      backend="aot_eager")(q)


def test_compiled_attention_on_transposed_views_matches_eager(torch_npu):
    """BNSD q/k/v as ``transpose(-1, -2)`` views under torch.compile: the fake kernel and the kernel
    agree (contiguous outputs), forward and backward, and both equal the op on contiguous copies."""
    gen = torch.Generator().manual_seed(0)
    make = lambda: torch.randn(B, N, H // N, S, generator=gen).transpose(-1, -2).requires_grad_()  # noqa: E731
    q, k, v = make(), make(), make()

    def attention(q, k, v):
        return torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", atten_mask=compressed(), sparse_mode=2,
                                              scale=1 / math.sqrt(H // N))[0]

    torch._dynamo.reset()
    compiled = torch.compile(attention, fullgraph=True, backend="aot_eager")(q, k, v)
    copies = [t.detach().contiguous().requires_grad_() for t in (q, k, v)]
    eager = attention(*copies)
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
    assert compiled.is_contiguous()
    for got, want in zip(torch.autograd.grad(compiled.sum(), (q, k, v)), torch.autograd.grad(eager.sum(), copies)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
