"""The training step's loss and optimizers (``parity.training``): the projection loss carries signal
through a normalised output, where the mean square's gradient is rounding noise; it is the same on
both sides; a one-element output is the loss itself; and the optimizers parity runs by default are
the ones whose updates no version counter sees."""

import contextlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from npu_migrate.migrate.parity.training import DEFAULT_OPTIMIZERS, OPTIMIZERS, loss

pytestmark = pytest.mark.slow


def normalised(seed=0):  # seed 0: the seed parity draws declared inputs from
    x = torch.randn(4, 32, 64, generator=torch.Generator().manual_seed(seed), requires_grad=True)
    return x, torch.nn.functional.layer_norm(x, (64,))


def test_mean_square_of_a_normalised_output_leaves_only_rounding_noise_below_it():
    gradients = {}
    for kind in ("mean_square", "projection"):
        x, y = normalised()
        loss(y, kind).backward()
        gradients[kind] = x.grad.abs().max().item()
    # the norm of a LayerNorm's output does not depend on its input: zero in exact arithmetic
    assert gradients["mean_square"] < 1e-7 < 1e-5 < gradients["projection"]


def test_projection_is_the_same_on_both_sides_and_depends_on_the_output():
    _, y = normalised()
    first, again = loss(y, "projection"), loss(y.detach().clone(), "projection")
    assert torch.equal(first.detach(), again)
    _, other = normalised(seed=1)
    assert not torch.equal(first.detach(), loss(other, "projection").detach())
    pair = loss((y, y * 2), "projection")  # every floating tensor of the output, each its own projection
    assert pair.shape == () and pair.requires_grad


def test_a_one_element_output_is_the_loss():
    value = torch.tensor([2.5], requires_grad=True)
    for kind in ("projection", "mean_square"):
        assert loss(value, kind).item() == 2.5


class Counting(TorchDispatchMode):
    """A do-nothing dispatch mode, as parity's op counter (``parity.coverage.OpTrace``)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("counting", [False, True])
def test_the_default_optimizers_update_the_weights_without_moving_their_version_counters(counting):
    """Why parity trains with them: AdamW(fused=True) moves no version counter; foreach=True moves none
    on an accelerator (issue 18) nor under a dispatch mode (as parity's migrated side runs), only in
    CPU eager mode. So a cache keyed on the counter goes stale from the second step."""
    moved = {}
    for name in DEFAULT_OPTIMIZERS + ("adamw-forloop",):
        weight = torch.nn.Parameter(torch.randn(4, 4))
        weight.grad = torch.randn(4, 4)
        before = (weight._version, weight.detach().clone())
        with Counting() if counting else contextlib.nullcontext():
            OPTIMIZERS[name]([weight], 1e-2).step()
        assert not torch.equal(weight.detach(), before[1])
        moved[name] = weight._version != before[0]
    assert moved == {"adamw-foreach": not counting, "adamw-fused": False, "adamw-forloop": True}
