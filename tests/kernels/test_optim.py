import copy
import inspect

import pytest
import torch
from torch.optim.optimizer import required

from npu_migrate.kernels import optim
from npu_migrate.kernels.optim import NpuFusedAdam, NpuFusedAdamW, NpuFusedSGD

CASES = [
    (NpuFusedAdamW, torch.optim.AdamW, dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-7, weight_decay=0.1)),
    (NpuFusedAdamW, torch.optim.AdamW, dict(lr=1e-2, amsgrad=True)),
    (NpuFusedAdam, torch.optim.Adam, dict(lr=1e-2, weight_decay=0.05)),
    (NpuFusedSGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=1e-3)),
    (NpuFusedSGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True)),
]


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


@pytest.mark.parametrize("fused_cls, torch_cls, kwargs", CASES)
def test_steps_match_torch(fused_cls, torch_cls, kwargs):
    a, b = model(), model()
    opt_a, opt_b = fused_cls(a.parameters(), **kwargs), torch_cls(b.parameters(), **kwargs)
    for step in range(3):
        x = torch.randn(5, 4, generator=torch.Generator().manual_seed(step))
        for m, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            m(x).pow(2).sum().backward()
            opt.step()
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)


@pytest.mark.parametrize("cls", [NpuFusedAdamW, NpuFusedAdam, NpuFusedSGD])
def test_bf16_params_raise_type_error(cls):
    p = torch.nn.Parameter(torch.randn(3, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="Fused optimizer's parameters must be either float32 or float16, but received"):
        cls([p], lr=0.1)
    opt = cls([torch.nn.Parameter(torch.randn(3))], lr=0.1)
    with pytest.raises(TypeError, match="float32 or float16"):
        opt.add_param_group({"params": [p]})


def test_fp16_params_accepted():
    NpuFusedAdamW([torch.nn.Parameter(torch.randn(3, dtype=torch.float16))])


def test_zero_grad_keeps_zero_tensors_by_default():
    m = model()
    opt = NpuFusedAdamW(m.parameters())
    m(torch.randn(2, 4)).sum().backward()
    opt.zero_grad()
    assert all(p.grad is not None and not p.grad.any() for p in m.parameters())
    opt.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in m.parameters())


def test_clip_grad_norm_fused_matches_torch():
    a, b = model(), model()
    for m in (a, b):
        m(torch.ones(3, 4)).pow(2).sum().backward()
    norm = NpuFusedSGD(a.parameters(), lr=0.1).clip_grad_norm_fused_(0.5)
    ref = torch.nn.utils.clip_grad_norm_(b.parameters(), 0.5, norm_type=2)
    torch.testing.assert_close(norm, ref)
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa.grad, pb.grad)


@pytest.mark.parametrize("cls, defaults", [
    (NpuFusedAdamW, dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False)),
    (NpuFusedAdam, dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False)),
    (NpuFusedSGD, dict(lr=required, momentum=0.0, dampening=0.0, weight_decay=0.0,
                       nesterov=False)),
])
def test_signatures(cls, defaults):
    params = inspect.signature(cls).parameters
    assert list(params) == ["params", *defaults]
    assert {n: params[n].default for n in defaults} == defaults


def test_sgd_requires_lr_and_exports():
    with pytest.raises(ValueError, match="lr"):
        NpuFusedSGD(model().parameters())
    assert set(optim.__all__) == {"NpuFusedAdamW", "NpuFusedAdam", "NpuFusedSGD"}
