"""The reference data about the real torch_npu 2.14.0 API (``opmap/reference/*.txt``, provenance in
its README): op schemas, aten ops with NPU kernels, the ``torch.npu`` API, fused ops with a backward,
the tensor arguments that must be contiguous,
and what the vendor's migration tools rewrite, patch or advise (``vendor_rows``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Tuple

DIRECTORY = Path(__file__).with_name("reference")
OP_SCHEMAS = DIRECTORY / "torch_npu_2.14.0_op_schemas.txt"
ATEN_OPS_WITH_NPU_KERNELS = DIRECTORY / "aten_ops_with_npu_kernels.txt"
DEVICE_API = DIRECTORY / "torch_npu_device_api.txt"
AUTOGRAD_NODES = DIRECTORY / "torch_npu_autograd_nodes.txt"
CONTIGUOUS_INPUTS = DIRECTORY / "torch_npu_contiguous_inputs.txt"
VENDOR_ROWS = DIRECTORY / "vendor_migration_rows.txt"


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


@dataclass(frozen=True)
class VendorRow:
    """One API a vendor tool rewrites, patches or advises about (vendor_migration_rows.txt)."""

    tool: str  # transfer_to_npu, msFmkTransplt or "msFmkTransplt advice"
    api: str  # a qualified name, ``Tensor.<method>``, or for ``string`` rows a regular expression
    match: str  # how a use looks in code (the file's header lists the kinds)
    action: str  # what the tool does

    @property
    def key(self) -> str:
        return f"{self.tool} | {self.api} | {self.match}"


@lru_cache(maxsize=None)
def vendor_rows() -> Tuple[VendorRow, ...]:
    rows = []
    for line in lines(VENDOR_ROWS):
        parts = [part.strip() for part in line.split(" | ")]
        if len(parts) != 4 or not all(parts):
            raise ValueError(f"{VENDOR_ROWS.name}: not 'tool | api | match | what the tool does': {line!r}")
        rows.append(VendorRow(*parts))
    return tuple(rows)
