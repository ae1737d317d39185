"""The precision a parity run computes in: a plain dtype, or automatic mixed precision.

A run is named by a label: ``float32``, ``bfloat16``, ``float16`` (the weights, floating inputs and
computation in that dtype) or ``amp-bfloat16`` / ``amp-float16`` (float32 weights and inputs, the
forward under autocast to that dtype: ``torch.autocast("cuda")`` on the original side, as CUDA
code runs, and ``torch.autocast("npu")`` on the migrated side, as migrated code runs; each
emulation maps its device type onto the backing device). Training under ``amp-float16`` scales
the loss with a ``GradScaler`` of the side's device type, as float16 training does.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import ContextManager, Optional

import torch

AMP_DTYPES = ("bfloat16", "float16")
AMP_PREFIX = "amp-"
AUTOCAST_DEVICE = {"original": "cuda", "migrated": "npu"}


@dataclass(frozen=True)
class Precision:
    label: str
    weights: torch.dtype  # parameters, floating buffers and floating inputs
    amp: Optional[torch.dtype] = None  # autocast dtype, None without autocast

    @property
    def criteria_dtype(self) -> str:
        """The dtype whose pass criteria apply: the autocast dtype under AMP."""
        return dtype_name(self.amp or self.weights)

    def autocast(self, side: str) -> ContextManager:
        """Autocast for ``side`` ("original": CUDA's, "migrated": the NPU's), or a no-op."""
        if self.amp is None:
            return nullcontext()
        return torch.autocast(AUTOCAST_DEVICE[side], dtype=self.amp)

    def grad_scaler(self, side: str) -> Optional["torch.amp.GradScaler"]:
        """A loss scaler for float16 autocast training, None otherwise."""
        if self.amp != torch.float16:
            return None
        return torch.amp.GradScaler(AUTOCAST_DEVICE[side])


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def amp_label(amp: str) -> str:
    return AMP_PREFIX + amp


def precision(label: str) -> Precision:
    """The ``Precision`` a run label names (labels are validated by the spec loader)."""
    if label.startswith(AMP_PREFIX):
        return Precision(label, torch.float32, getattr(torch, label[len(AMP_PREFIX):]))
    return Precision(label, getattr(torch, label))


def cast_floating(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """``model`` with its floating-point parameters and buffers in ``dtype``; complex and integer
    tensors keep their dtype (``Module.to(dtype)`` would turn a complex ``freqs_cis`` real, losing
    its imaginary part)."""
    return model._apply(lambda t: t.to(dtype) if t.is_floating_point() else t)
