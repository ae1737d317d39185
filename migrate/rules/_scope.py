"""Which files the receiver and string rewrites may change (``.cuda()``, ``.is_cuda``, ``"cuda"``
device strings, ``"nccl"`` backends).

On their own these say nothing about torch: CuPy, Numba and plain NumPy code has them too. Inside
one file's run the cheap evidence is the file's imports and its path:

- ``torch``: the file imports torch, torch_npu or a library built on torch (``TORCH_LIBRARIES``);
- ``package``: it imports none of them but imports from its own package (a relative import, or an
  absolute one whose top name is a directory on the file's path) and no other GPU array library:
  its tensors come from modules of the same tree, which import torch and are migrated in the
  same run;
- ``foreign``: it imports a GPU array library that is not torch (``FOREIGN_LIBRARIES``, CuPy,
  Numba, JAX, ...) and not torch: its ``.cuda``/``"cuda"`` belong to that library (the library
  itself is reported, NPU119), so the sites are left alone, silently;
- ``unknown``: none of these (a script or helper with no imports that calls ``x.cuda()`` on what it
  is given): the site is *reported* under the rule's code with the plan of the
  ``pattern.device.outside_torch`` record, never rewritten, so nothing that may not be torch is
  changed and nothing is silent.

Rewrites happen only in ``torch`` and ``package`` files, so ``import torch_npu`` is only added there.
"""

from __future__ import annotations

from typing import Optional, Set

import libcst as cst

from npu_migrate.migrate.rules._table import plan_of
from npu_migrate.migrate.rules.base import Rule

TORCH_LIBRARIES = frozenset({
    "torch", "torch_npu", "torchvision", "torchaudio", "torchtext", "transformers", "accelerate", "lightning",
    "pytorch_lightning", "lightning_fabric", "deepspeed", "timm", "peft", "diffusers", "trl", "torchtune", "litgpt",
    "fairseq", "megatron", "apex", "vllm", "xformers", "flash_attn", "mamba_ssm", "bitsandbytes", "torchmetrics",
})
FOREIGN_LIBRARIES = frozenset({
    "cupy", "cupyx", "numba", "pycuda", "cuda", "jax", "jaxlib", "tensorflow", "mxnet", "paddle", "tinygrad",
    "pyopencl", "mlx",
})
RECORD = "pattern.device.outside_torch"
TORCH, PACKAGE, FOREIGN, UNKNOWN = "torch", "package", "foreign", "unknown"


def file_scope(ctx) -> str:
    """``torch``, ``package``, ``foreign`` or ``unknown`` for the file of ``ctx`` (module docstring)."""
    heads: Set[str] = ctx.names.imported_heads()
    if heads & TORCH_LIBRARIES:
        return TORCH
    if heads & FOREIGN_LIBRARIES:
        return FOREIGN
    directories = set(ctx.path.replace("\\", "/").split("/")[:-1])
    if ctx.names.relative_imports or heads & directories:
        return PACKAGE
    return UNKNOWN


class TorchScoped(Rule):
    """Mixin of the receiver and string rules: ``scoped_replace`` rewrites in torch files, reports
    in files of unknown kind and stays silent in files of another GPU library."""

    _scope: Optional[str] = None

    @property
    def scope(self) -> str:
        if self._scope is None:
            self._scope = file_scope(self.ctx)
        return self._scope

    def scoped_replace(self, node: cst.CSTNode, new, message: str, **kwargs) -> None:
        if self.scope in (TORCH, PACKAGE):
            self.replace(node, new, message, **kwargs)
        elif self.scope == UNKNOWN:
            fallback = plan_of(self.ctx.table, RECORD, message)
            self.report(node, f"{message} not made: this file imports neither torch nor its own package, so the "
                        f"value may not be torch's", fallback=fallback, api=kwargs.get("api"), code=kwargs.get("code"))
