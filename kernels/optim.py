"""Fused optimizers, exposed by the emulated device as ``torch_npu.optim``.

The numbers are torch's AdamW / Adam / SGD (the fused kernels compute the same update on
flattened buffers). The traps of the real classes are kept: only float32/float16 parameters
(a bf16 model raises ``TypeError``), ``zero_grad(set_to_none=False)`` by default, and gradient
clipping through ``clip_grad_norm_fused_`` instead of ``torch.nn.utils.clip_grad_norm_``.
"""

from __future__ import annotations

import torch
from torch.optim.optimizer import required

__all__ = ["NpuFusedAdamW", "NpuFusedAdam", "NpuFusedSGD"]

# Module constants of torch_npu/optim/npu_fused_sgd.py, used as NpuFusedSGD's defaults.
MOMENTUM_MIN = 0.0
DAMPENING_DEFAULT = 0.0
WEIGHT_DECAY_MIN = 0.0

_FUSED_DTYPES = (torch.float32, torch.float16)


class _NpuFusedMixin:
    """What the real ``NpuFusedOptimizerBase`` adds on top of the torch update rule."""

    def add_param_group(self, param_group):
        params = param_group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        for p in params:
            if p.dtype not in _FUSED_DTYPES:
                raise TypeError(
                    f"Fused optimizer's parameters must be either float32 or float16, but received {p.dtype}"
                )
        super().add_param_group(param_group)

    def zero_grad(self, set_to_none: bool = False):
        super().zero_grad(set_to_none=set_to_none)

    def clip_grad_norm_fused_(self, max_norm, norm_type=2):
        """Clip the gradients of all parameters together; returns the total norm before clipping."""
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        return torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)


class NpuFusedAdamW(_NpuFusedMixin, torch.optim.AdamW):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)


class NpuFusedAdam(_NpuFusedMixin, torch.optim.Adam):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)


class NpuFusedSGD(_NpuFusedMixin, torch.optim.SGD):
    def __init__(self, params, lr=required, momentum=MOMENTUM_MIN, dampening=DAMPENING_DEFAULT,
                 weight_decay=WEIGHT_DECAY_MIN, nesterov=False):
        if lr is required:
            raise ValueError("NpuFusedSGD: the learning rate lr is required")
        super().__init__(params, lr=lr, momentum=momentum, dampening=dampening,
                         weight_decay=weight_decay, nesterov=nesterov)
