"""The diagnostic codes of dependency and launcher files, each declared once (as the rules declare
theirs); ``diagnostics.declarations()`` lists them with the tool's and the rules' codes, and their
doc pages' Example sections come from the fixtures they name (``fixtures/files/<CODE>_<example>/``).
"""

from __future__ import annotations

from typing import Tuple

from npu_migrate.migrate.diagnostics import DiagnosticCode

FIXTURES = "files"


def _code(code: str, name: str, summary: str, example: str, rewrites: bool = False) -> DiagnosticCode:
    return DiagnosticCode(code, name, summary, rewrites=rewrites, example=example, fixtures=FIXTURES)


DECLARATIONS: Tuple[DiagnosticCode, ...] = (
    _code("NPU130", "cuda-only-package",
          "a declared package that needs NVIDIA GPUs (flash-attn, xformers, apex, nvidia-*, ...): reported with "
          "its NPU replacement plan", "cuda_only_package"),
    _code("NPU131", "cuda-build",
          "a CUDA build of a package (torch==2.4.0+cu121, a conda CUDA build) or a CUDA package index or channel: "
          "reported with the CPU-build plan", "cuda_build"),
    _code("NPU132", "torch-npu-unmatched",
          "the code imports torch_npu but no torch-npu release can be pinned beside this torch declaration: "
          "reported with the line to add", "torch_npu_unmatched"),
    _code("NPU133", "cuda-environment",
          "a CUDA, NCCL or NVIDIA setting with no exact NPU equivalent: reported with its plan",
          "cuda_environment"),
    _code("NPU134", "gpu-count",
          "a launcher counts or requests GPUs (nvidia-smi -L | wc -l, --nproc_per_node=gpu, --gres=gpu): "
          "reported with how to count NPUs", "gpu_count"),
    _code("NPU135", "cuda-base-image",
          "a container built FROM a CUDA image: reported with the CANN image plan", "cuda_base_image"),
    _code("NPU136", "release-without-npu",
          "a package pinned to a release that predates its NPU support (deepspeed<0.9.3, ...): reported",
          "release_without_npu"),
    _code("NPU137", "config-accelerator",
          "an accelerator choice in a YAML/JSON config (Lightning accelerator: gpu, Accelerate distributed_type: "
          "MULTI_GPU): reported with the NPU plan", "config_accelerator"),
    _code("NPU138", "config-cuda-value",
          "a whole cuda/nccl value in a YAML/JSON config where the key is not known to name the device or backend "
          "(a list of choices, another tool's setting): kept and reported", "config_cuda_value"),
    _code("NPU139", "config-unreadable",
          "a YAML/JSON file that mentions CUDA, NCCL or GPUs but does not parse (a template, JSON Lines): not "
          "checked; reported", "config_unreadable"),
    _code("NPU220", "torch-npu-requirement",
          "an exact torch pin gains the matching torch-npu requirement beside it (where the code imports torch_npu)",
          "torch_npu_requirement", rewrites=True),
    _code("NPU221", "visible-devices", "CUDA_VISIBLE_DEVICES → ASCEND_RT_VISIBLE_DEVICES (where the value is exact)",
          "visible_devices", rewrites=True),
    _code("NPU222", "environment-rename",
          "a CUDA/NCCL setting → its exact NPU/HCCL equivalent (NCCL_SOCKET_IFNAME → HCCL_SOCKET_IFNAME, ...)",
          "environment_rename", rewrites=True),
    _code("NPU223", "nvidia-smi",
          "nvidia-smi whose output is only shown → npu-smi info (reported where its output is parsed)",
          "nvidia_smi", rewrites=True),
    _code("NPU224", "config-device-backend",
          "a device or collective-backend value of a YAML/JSON config → its NPU name (device: cuda → npu, "
          "backend: nccl → hccl; where the code imports torch_npu)", "config_device_backend", rewrites=True),
)

# The report's "dependencies and environment" section groups findings by these codes.
DEPENDENCY_CODES = frozenset({"NPU130", "NPU131", "NPU132", "NPU136", "NPU220"})
ENVIRONMENT_CODES = frozenset({"NPU133", "NPU134", "NPU135", "NPU137", "NPU138", "NPU221", "NPU222", "NPU223",
                               "NPU224"})
