"""The reference data about the real torch_npu 2.14.0 API (``opmap/reference/*.txt``, provenance in
its README): op schemas, aten ops with NPU kernels, the ``torch.npu`` API, fused ops with a backward,
the tensor arguments that must be contiguous."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Tuple

DIRECTORY = Path(__file__).with_name("reference")
OP_SCHEMAS = DIRECTORY / "torch_npu_2.14.0_op_schemas.txt"
ATEN_OPS_WITH_NPU_KERNELS = DIRECTORY / "aten_ops_with_npu_kernels.txt"
DEVICE_API = DIRECTORY / "torch_npu_device_api.txt"
AUTOGRAD_NODES = DIRECTORY / "torch_npu_autograd_nodes.txt"
CONTIGUOUS_INPUTS = DIRECTORY / "torch_npu_contiguous_inputs.txt"


@lru_cache(maxsize=None)
def lines(path: Path) -> List[str]:
    """The file's lines without comments (``#``) and blank lines."""
    text = Path(path).read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


@lru_cache(maxsize=None)
def contiguous_inputs() -> Dict[str, Tuple[str, ...]]:
    """op name -> the tensor arguments its documentation requires to be contiguous
    (``op: arg, arg  # source`` lines of ``CONTIGUOUS_INPUTS``)."""
    found = {}
    for line in lines(CONTIGUOUS_INPUTS):
        op, _, args = line.partition("#")[0].partition(":")
        found[op.strip()] = tuple(a.strip() for a in args.split(",") if a.strip())
    return found
