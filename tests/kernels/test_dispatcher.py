"""The emulated ops as dispatcher ops (``torch.ops.npu.*``): schemas, fake kernels, autograd.

``torch.library.opcheck`` checks each op's registration on sample inputs: the schema against what
the kernel does, the Autograd registration, the fake (meta) kernel against the real outputs, and
AOT dispatch with dynamic shapes. The gradient tests compare the backward ops (the path through
the dispatcher) with autograd through the kernels' own float32 math.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from npu_migrate import kernels
from npu_migrate.kernels import dispatcher
from npu_migrate.kernels._checks import NpuOpError
from npu_migrate.kernels.registry import load_all, specs
from npu_migrate.opmap import reference
from tests.kernels.attention_ref import compressed
from tests.kernels.samples import MUTATES_UNDECLARED, SAMPLES, fa_grad_sample, r

REPO = Path(__file__).resolve().parents[2]
OPS = load_all()


@pytest.fixture(scope="module", autouse=True)
def registered():
    with kernels.emulate():
        yield




def test_every_op_has_a_sample():
    assert sorted(set(OPS) - set(SAMPLES)) == [] and sorted(set(SAMPLES) - set(OPS)) == []


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_is_defined_with_its_real_schema(name):
    import torch_npu

    line = next(text for overload, text, _ in dispatcher.schema_lines()[name] if not overload)
    assert str(getattr(torch.ops.npu, name).default._schema) == str(torch._C.parse_schema("npu::" + line))
    assert getattr(torch_npu, name) is getattr(torch.ops.npu, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(OPS))
def test_opcheck(name):
    args, kwargs = SAMPLES[name]()
    tests = ["test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"]
    if name not in MUTATES_UNDECLARED:
        tests.append("test_schema")
    torch.library.opcheck(getattr(torch.ops.npu, name).default, args, kwargs, test_utils=tests)


def test_backward_exactly_where_torch_npu_has_an_autograd_node():
    nodes = set(reference.lines(reference.AUTOGRAD_NODES))
    camel = lambda name: "".join(part.capitalize() for part in name.split("_"))  # noqa: E731
    with_backward = {name for name, spec in specs().items() if spec.derivative is not None}
    assert with_backward == {name for name in OPS if camel(name) in nodes}
    assert {"npu_fusion_attention", "npu_rms_norm", "npu_rotary_mul", "npu_swiglu", "npu_moe_gating_top_k"} <= with_backward


def test_tags_come_from_the_schema_file():
    assert torch.Tag.nondeterministic_seeded in torch.ops.npu.npu_fusion_attention.default.tags
    assert torch.Tag.nondeterministic_seeded not in torch.ops.npu.npu_rms_norm.default.tags


def test_overloads_the_kernel_implements_are_defined_too():
    """npu_grouped_matmul.List takes group_list as an int list; the packet picks the overload."""
    x, w = r(6, 8), r(3, 8, 4, seed=1)
    by_tensor = torch.ops.npu.npu_grouped_matmul([x], [w], group_list=torch.tensor([2, 5, 6]), group_type=0)
    by_list = torch.ops.npu.npu_grouped_matmul([x], [w], group_list=[2, 5, 6], group_type=0)
    assert [t.shape for t in by_list] == [(2, 4), (3, 4), (1, 4)]
    assert all(torch.equal(a, b) for a, b in zip(by_tensor, by_list))
    assert not hasattr(torch.ops.npu.npu_fused_infer_attention_score, "out")  # out= variants are not emulated


def test_registration_is_idempotent_and_stays():
    before = list(dispatcher.DEFINED)
    for _ in range(3):
        with kernels.emulate():
            import torch_npu

            assert torch_npu.npu_swiglu is torch.ops.npu.npu_swiglu
    assert dispatcher.register() and dispatcher.DEFINED == before
    assert len(before) == len(set(before)) >= len(OPS)


# ----------------------------------------------------------------------------- autograd


def _grads(op, args, kwargs, output=0, seed=7):
    """Gradients of sum(out[output] * w) for a fixed random w, w.r.t. the grad-requiring args."""
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    out = op(*args, **kwargs)
    out = out[output] if isinstance(out, (tuple, list)) else out
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    grads = torch.autograd.grad((out.float() * w).sum(), leaves, allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for t, g in zip(leaves, grads)]


DIFFERENTIABLE = sorted(name for name, spec in specs().items() if spec.derivative is not None)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_dispatcher_gradients_match_autograd_through_the_kernel(name):
    """The backward op (npu_rms_norm_backward, npu_fusion_attention_grad, ...) vs autograd through
    the kernel's own float32 math (and, for attention, the blocked core's own backward)."""
    args, kwargs = SAMPLES[name]()
    via_dispatcher = _grads(getattr(torch.ops.npu, name), args, kwargs)
    direct_args = tuple(a.detach().requires_grad_() if isinstance(a, torch.Tensor) and a.requires_grad else a
                        for a in args)
    direct = _grads(OPS[name], direct_args, kwargs)
    assert len(via_dispatcher) == len(direct) > 0
    for got, want in zip(via_dispatcher, direct):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_add_layer_norm_gradient_of_the_sum_output():
    args, kwargs = SAMPLES["npu_add_layer_norm"]()
    via = _grads(torch.ops.npu.npu_add_layer_norm, args, kwargs, output=3)
    direct = _grads(OPS["npu_add_layer_norm"], tuple(a.detach().requires_grad_() for a in args), kwargs, output=3)
    for got, want in zip(via, direct):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("layout", ["BSH", "TND"])
def test_fusion_attention_gradients_replay_dropout_and_layouts(layout):
    """The grad op replays the forward's dropout mask from the returned seed, in BSH and TND."""
    if layout == "BSH":
        q, k, v = r(2, 8, 64, grad=True), r(2, 8, 32, grad=True, seed=1), r(2, 8, 32, grad=True, seed=2)
        kwargs = dict(keep_prob=0.7, scale=0.25)
    else:
        q, k, v = r(10, 4, 16, grad=True), r(12, 2, 16, grad=True, seed=1), r(12, 2, 16, grad=True, seed=2)
        kwargs = dict(keep_prob=0.7, scale=0.25, actual_seq_qlen=[4, 10, 0], actual_seq_kvlen=[5, 12, 0],
                      atten_mask=compressed(), sparse_mode=3, softmax_layout="TND")
    torch.manual_seed(5)
    via = _grads(torch.ops.npu.npu_fusion_attention, (q, k, v, 4, layout), kwargs)
    torch.manual_seed(5)
    direct = _grads(OPS["npu_fusion_attention"], tuple(t.detach().requires_grad_() for t in (q, k, v)) + (4, layout),
                    kwargs)
    for got, want in zip(via, direct):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_grad_op_recomputes_missing_statistics():
    (q, k, v, dy, n, layout), kwargs = fa_grad_sample()
    given = torch.ops.npu.npu_fusion_attention_grad(q, k, v, dy, n, layout, **kwargs)
    recomputed = torch.ops.npu.npu_fusion_attention_grad(q, k, v, dy, n, layout, scale_value=0.25)
    for a, b in zip(given[:3], recomputed[:3]):
        torch.testing.assert_close(a, b)
    assert given[3].shape == (0,) and given[4].shape == ()


def test_pse_and_non_differentiable_outputs_get_no_gradient():
    q = r(1, 2, 8, 16, grad=True)
    pse = r(1, 2, 8, 8, grad=True, seed=1)
    out, smax, ssum, *_ = torch.ops.npu.npu_fusion_attention(q, q, q, 2, "BNSD", pse=pse, scale=0.25)
    assert not smax.requires_grad and not ssum.requires_grad
    out.sum().backward()
    assert q.grad is not None and pse.grad is None
    y, rstd = torch.ops.npu.npu_rms_norm(r(2, 8, grad=True), r(8, grad=True))
    assert y.requires_grad and not rstd.requires_grad


@pytest.mark.parametrize("name", ["npu_add_rms_norm", "npu_gemma_rms_norm", "npu_moe_gating_top_k_softmax",
                                  "npu_moe_init_routing", "npu_grouped_matmul", "npu_prompt_flash_attention"])
def test_ops_without_backward_refuse_grad_inputs(name):
    args, kwargs = SAMPLES[name]()
    first = args[0][0] if isinstance(args[0], list) else args[0]
    first.requires_grad_()
    with pytest.raises(NpuOpError, match="no backward"):
        getattr(torch.ops.npu, name)(*args, **kwargs)
    with torch.no_grad():
        getattr(torch.ops.npu, name)(*args, **kwargs)


def test_rotary_with_a_rotate_matrix_refuses_gradients():
    x, c = r(1, 2, 4, 16, grad=True), r(1, 1, 4, 16, seed=1)
    rotate = torch.eye(16)
    with pytest.raises(NpuOpError, match="rotate has no backward"):
        torch.ops.npu.npu_rotary_mul(x, c, c, "half", rotate)
    with torch.no_grad():
        torch.ops.npu.npu_rotary_mul(x, c, c, "half", rotate)


def test_autograd_node_names_follow_torch_npu():
    y = torch.ops.npu.npu_rms_norm(r(2, 8, grad=True), r(8))[0]
    assert type(y.grad_fn).__name__ == "NpuRmsNormBackward"


# ----------------------------------------------------------------------------- a real torch_npu wins


def _run(script: str, tmp_path: Path, fake_torch_npu: bool) -> list:
    paths = [str(REPO)]
    if fake_torch_npu:
        package = tmp_path / "torch_npu"
        package.mkdir()
        (package / "__init__.py").write_text("REAL = True\n")
        paths.insert(0, str(tmp_path))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.mark.slow
def test_an_importable_torch_npu_gets_no_emulated_ops(tmp_path):
    script = """
        import warnings, torch
        from npu_migrate import kernels
        from npu_migrate.kernels import dispatcher
        warnings.simplefilter("ignore")
        print(kernels.activate(), dispatcher.register(), hasattr(torch.ops.npu, "npu_rms_norm"), len(dispatcher.DEFINED))
    """
    assert _run(script, tmp_path, fake_torch_npu=True) == ["False", "False", "False", "0"]


@pytest.mark.slow
def test_ops_already_in_the_namespace_are_left_alone_and_registration_is_cheap(tmp_path):
    """An op some other library (a real torch_npu) defined first keeps its kernel. The first
    activation imports the kernels and registers the ops (seconds at most); later ones reuse them."""
    script = """
        import time, torch
        lib = torch.library.Library("npu", "DEF")
        lib.define("npu_swiglu(Tensor self, int dim=-1) -> Tensor")
        lib.impl("npu_swiglu", lambda x, dim=-1: x.new_full((1,), 42.0), "CPU")
        from npu_migrate import kernels
        start = time.perf_counter(); kernels.activate(); first = time.perf_counter() - start
        import torch_npu
        print(torch_npu.npu_swiglu(torch.ones(2, 4)).item(), torch_npu.npu_rms_norm(torch.ones(2, 4), torch.ones(4))[0].shape[0])
        kernels.deactivate()
        start = time.perf_counter(); kernels.activate(); again = time.perf_counter() - start
        print(first < 5, again < first)
    """
    assert _run(script, tmp_path, fake_torch_npu=False) == ["42.0", "2", "True", "True"]
