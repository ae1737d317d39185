"""Every emulated op on views: each tensor argument of each op's sample, in each view kind.

The real op layer computes on its inputs' values (``kernels.registry``), so an op on a view must
give exactly (bit for bit) what it gives on the view's ``.contiguous()`` copy, return contiguous
outputs, leave its inputs alone (the in-place ``npu_apply_rotary_pos_emb`` aside), and do the same
in backward and under tracing (fake kernels, strides included). Where torch_npu's documentation
rejects a layout, the op raises instead: the arguments listed in
``opmap/reference/torch_npu_contiguous_inputs.txt`` when they are not contiguous, and
``npu_grouped_matmul``'s transposed ``x`` (its page: "x不支持转置"). The comparisons with float64
references on views are in ``test_views_reference.py``.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from npu_migrate import kernels
from npu_migrate.kernels import dispatcher
from npu_migrate.kernels._checks import NpuOpError
from npu_migrate.kernels.registry import load_all, specs
from npu_migrate.opmap import reference
from tests.kernels import views
from tests.kernels.samples import MUTATES_UNDECLARED, SAMPLES

OPS = load_all()
dispatcher.register()  # the samples of the backward ops call their forward ops


@pytest.fixture(scope="module", autouse=True)
def emulated():
    with kernels.emulate():
        yield


# ----------------------------------------------------------------------------- the cases


def _slots(name):
    """(label, position, list index) of every tensor argument of the op's sample; the label is the
    parameter name (``x[0]`` for a list element), the position an index into args or a kwarg name."""
    args, kwargs = SAMPLES[name]()
    params = list(inspect.signature(OPS[name]).parameters)
    found = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            found.append((params[i], i, None))
        elif isinstance(a, list):
            found += [(f"{params[i]}[{j}]", i, j) for j, t in enumerate(a) if isinstance(t, torch.Tensor)]
    found += [(k, k, None) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    return found


def _get(args, kwargs, slot):
    _, where, j = slot
    value = kwargs[where] if isinstance(where, str) else args[where]
    return value if j is None else value[j]


def _set(args, kwargs, slot, value):
    if slot is None:
        return
    _, where, j = slot
    if j is not None:
        items = list(kwargs[where] if isinstance(where, str) else args[where])
        items[j] = value
        value = items
    if isinstance(where, str):
        kwargs[where] = value
    else:
        args[where] = value


def _applies(t, kind):
    return views.view(t, kind) is not None and (not views.changes_values(kind) or t.is_floating_point())


def _cases():
    cases = []
    for name in sorted(SAMPLES):
        args, kwargs = SAMPLES[name]()
        for slot in _slots(name):
            cases += [(name, slot, kind) for kind in views.KINDS if _applies(_get(args, kwargs, slot), kind)]
    return cases


CASES = _cases()


def _case_id(case):
    name, slot, kind = case
    return f"{name}-{slot[0]}-{kind}"


def _copy(value, grad):
    """A deep copy of sample arguments, in new storage: grad leaves again where ``grad`` and they were."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(grad and value.requires_grad)
    if isinstance(value, list):
        return [_copy(v, grad) for v in value]
    return value


def _sample(name):
    """The op's sample arguments (one draw: the comparisons copy it, never draw again)."""
    args, kwargs = SAMPLES[name]()
    return list(args), dict(kwargs)


def _with(sample, slot, value, grad=False):
    """A copy of ``sample`` (grad leaves kept where ``grad``) with ``value`` in ``slot``."""
    args, kwargs = sample
    args, kwargs = [_copy(a, grad) for a in args], {k: _copy(v, grad) for k, v in kwargs.items()}
    _set(args, kwargs, slot, value)
    return args, kwargs


def _documented_refusal(name, slot, value) -> bool:
    """Whether torch_npu's documentation rejects this layout for this argument (module doc)."""
    label = slot[0]
    if label in reference.contiguous_inputs().get(name, ()) and not value.is_contiguous():
        return True
    rows, cols = value.shape if value.dim() == 2 else (0, 0)
    transposed = rows > 1 and cols > 1 and value.stride() == (1, rows)
    return name == "npu_grouped_matmul" and label.startswith("x[") and transposed


def _outputs(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _outputs(o)]
    return []


def _assert_identical(got, want):
    if not isinstance(got, (torch.Tensor, list, tuple)):
        assert got == want
        return
    got_t, want_t = _outputs(got), _outputs(want)
    assert len(got_t) == len(want_t) > 0
    for g, w in zip(got_t, want_t):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.is_contiguous(), f"output with strides {g.stride()}: the kernel writes contiguous outputs"
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
    if isinstance(got, tuple):
        plain = lambda out: [x for x in out if not isinstance(x, torch.Tensor)]  # noqa: E731
        assert plain(got) == plain(want)


# ----------------------------------------------------------------------------- forward


def test_every_op_is_run_on_views():
    assert {name for name, _, _ in CASES} == set(OPS)
    assert {kind for _, _, kind in CASES} == set(views.KINDS)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_op_on_a_view_gives_its_contiguous_copys_result_or_the_documented_refusal(case):
    name, slot, kind = case
    op = getattr(torch.ops.npu, name)
    sample = _sample(name)
    view = views.view(_get(*sample, slot), kind)
    args, kwargs = _with(sample, slot, view)
    if _documented_refusal(name, slot, view):
        before = view.clone()
        with pytest.raises(NpuOpError, match="must be contiguous|is transposed"):
            op(*args, **kwargs)
        assert torch.equal(view, before)  # nothing written before the refusal
        return
    copy_args, copy_kwargs = _with(sample, slot, view.clone(memory_format=torch.contiguous_format))
    before = view.clone()
    with torch.no_grad():
        torch.manual_seed(0)
        got = op(*args, **kwargs)
        torch.manual_seed(0)
        want = op(*copy_args, **copy_kwargs)
    _assert_identical(got, want)
    if name in MUTATES_UNDECLARED:  # the in-place op wrote through the view exactly as into the copy
        torch.testing.assert_close(view, _get(copy_args, copy_kwargs, slot), rtol=0, atol=0)
    else:
        assert torch.equal(view, before)


# ----------------------------------------------------------------------------- backward

DIFFERENTIABLE = sorted(name for name, spec in specs().items() if spec.derivative is not None)
GRAD_CASES = [c for c in CASES if c[0] in DIFFERENTIABLE and _get(*SAMPLES[c[0]](), c[1]).requires_grad
              and not _documented_refusal(c[0], c[1], views.view(_get(*SAMPLES[c[0]](), c[1]), c[2]))]


def _weighted_grads(op, args, kwargs):
    """Gradients of ``sum(out[0] * w)`` (w fixed) with respect to every grad-requiring tensor argument."""
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    out = op(*args, **kwargs)
    out = out[0] if isinstance(out, (tuple, list)) else out
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
    grads = torch.autograd.grad((out.float() * w).sum(), leaves, allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for t, g in zip(leaves, grads)]


@pytest.mark.slow
@pytest.mark.parametrize("direct", [False, True], ids=["dispatcher", "kernel"])
@pytest.mark.parametrize("case", GRAD_CASES, ids=_case_id)
def test_gradients_through_a_view_equal_those_through_its_contiguous_copy(case, direct):
    """The view is itself the grad leaf (a leaf keeps its strides); ``kernel``: the kernel function
    called directly, with its own autograd (the attention core's, SDPA's)."""
    name, slot, kind = case
    op = OPS[name] if direct else getattr(torch.ops.npu, name)
    sample = _sample(name)
    view = views.view(_get(*sample, slot), kind)
    got = _weighted_grads(op, *_with(sample, slot, view.requires_grad_(), grad=True))
    want = _weighted_grads(op, *_with(sample, slot, view.detach().clone(memory_format=torch.contiguous_format)
                                      .requires_grad_(), grad=True))
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=0, atol=0)


# ----------------------------------------------------------------------------- tracing


def _all_viewed(name, kind):
    """The sample with every tensor argument the op takes in any layout turned into ``kind``. (AOT
    dispatch traces on clones, which keep only the order of the strides: a view whose clone the op
    refuses stays contiguous too.)"""
    args, kwargs = _with(_sample(name), None, None)
    for slot in _slots(name):
        t = _get(args, kwargs, slot)
        if _applies(t, kind):
            v = views.view(t, kind)
            if not (_documented_refusal(name, slot, v) or _documented_refusal(name, slot, v.clone())):
                _set(args, kwargs, slot, v)
    return args, kwargs


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["as_strided", "expand"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_fake_kernels_agree_with_the_kernels_on_views(name, kind):
    """opcheck's fake-tensor test compares the fake kernel's outputs with the real ones, strides
    included; AOT dispatch traces the op (and its backward) with dynamic shapes."""
    args, kwargs = _all_viewed(name, kind)
    tests = ["test_faketensor"] + (["test_aot_dispatch_dynamic"] if kind == "as_strided" else [])
    torch.library.opcheck(getattr(torch.ops.npu, name).default, args, kwargs, test_utils=tests)


REFUSAL_CASES = [c for c in CASES if _documented_refusal(c[0], c[1], views.view(_get(*SAMPLES[c[0]](), c[1]), c[2]))]


@pytest.mark.slow
@pytest.mark.parametrize("case", REFUSAL_CASES, ids=_case_id)
def test_tracing_refuses_what_the_kernel_refuses(case):
    name, slot, kind = case
    sample = _sample(name)
    args, kwargs = _with(sample, slot, views.view(_get(*sample, slot), kind))
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        def fake(v):
            if isinstance(v, list):
                return [fake(x) for x in v]
            return mode.from_tensor(v) if isinstance(v, torch.Tensor) else v

        with pytest.raises(NpuOpError):
            getattr(torch.ops.npu, name)(*[fake(a) for a in args], **{k: fake(v) for k, v in kwargs.items()})


def test_every_documented_refusal_is_exercised():
    """Each argument of the contiguity reference is an argument of its op's sample, refused above."""
    listed = reference.contiguous_inputs()
    assert set(listed) <= set(OPS)
    for name, arguments in listed.items():
        assert specs()[name].contiguous == arguments
        assert {c[1][0] for c in REFUSAL_CASES if c[0] == name} == set(arguments)
