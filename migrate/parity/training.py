"""What the training step of a parity case runs: the optimizer a user would run and the loss.

``OPTIMIZERS``: AdamW in the implementations torch picks or users pick (``foreach``, the default
on an accelerator; ``fused``; the plain for-loop) and plain SGD. ``foreach`` and ``fused`` update
the parameters without moving their version counters, so migrated code that kept something derived
from a parameter between calls diverges from the second step on (docs/parity.md).

``LOSSES``: ``projection`` (the default) takes a fixed random projection of every floating output,
``sum(mean(t * R_t))`` with ``R_t`` standard normal from a seeded generator (the same on both
sides): its gradient with respect to the output is ``R_t``, which carries signal through a
normalised output, where the mean square's gradient is rounding noise (the norm of a LayerNorm's
output does not depend on its input). ``mean_square`` is the sum of the mean squares of the floating
outputs. A one-element output is the loss itself under both.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable

import torch

from npu_migrate.migrate.parity.outputs import live_tensors

#: the projections' seed: not parity's seed 0 of the inputs, so that a declared input is never its own
#: projection (a normalised output of a random input projected on that input has no gradient)
PROJECTION_SEED = 20250818

OPTIMIZERS: Dict[str, Callable[[Iterable[torch.nn.Parameter], float], torch.optim.Optimizer]] = {
    "adamw-foreach": lambda params, lr: torch.optim.AdamW(params, lr=lr, foreach=True),
    "adamw-fused": lambda params, lr: torch.optim.AdamW(params, lr=lr, fused=True),
    "adamw-forloop": lambda params, lr: torch.optim.AdamW(params, lr=lr, foreach=False),
    "sgd": lambda params, lr: torch.optim.SGD(params, lr=lr),
}
LOSSES = ("projection", "mean_square")
DEFAULT_OPTIMIZERS = ("adamw-foreach", "adamw-fused")
DEFAULT_STEPS = 3
DEFAULT_LR = 1e-3


def loss(output: Any, kind: str) -> torch.Tensor:
    """The scalar the training step back-propagates (see the module docstring)."""
    if isinstance(output, torch.Tensor) and output.numel() == 1:
        return output.float().reshape(())
    tensors = [t for t in live_tensors(output) if t.is_floating_point()]
    if not tensors:
        raise ValueError("the selected output holds no floating-point tensor to build a loss from")
    if kind == "mean_square":
        return sum(t.float().pow(2).mean() for t in tensors)
    generator = torch.Generator().manual_seed(PROJECTION_SEED)
    return sum((t.float() * torch.randn(t.shape, generator=generator).to(t.device)).mean() for t in tensors)
