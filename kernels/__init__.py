"""The emulated NPU: pure-PyTorch implementations of the torch_npu API and an emulated device.

``kernels.emulate()`` runs migrated code (``"npu"`` devices, ``torch.npu``, ``import torch_npu``)
on CPU or CUDA; ``kernels.emulate_cuda()`` runs original CUDA code on a machine without CUDA.
"""

from .emulation import activate, activate_cuda, deactivate, emulate, emulate_cuda, is_emulated

__all__ = ["activate", "activate_cuda", "deactivate", "emulate", "emulate_cuda", "is_emulated"]
