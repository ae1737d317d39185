"""The reference data about the real torch_npu (``opmap/reference/``, provenance in its README): the
2.14.0 API (op schemas, aten ops with NPU kernels, the ``torch.npu`` API, fused ops with a backward,
the tensor arguments that must be contiguous), what the vendor's migration tools rewrite, patch or
advise (``vendor_rows``), and which torch-npu release goes with which torch release
(``torch_npu_releases``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Tuple

import yaml

from npu_migrate.opmap.records import text
from npu_migrate.opmap.yaml_source import SchemaError, check_keys, compose, line_of, mapping_items, plain

DIRECTORY = Path(__file__).with_name("reference")
OP_SCHEMAS = DIRECTORY / "torch_npu_2.14.0_op_schemas.txt"
ATEN_OPS_WITH_NPU_KERNELS = DIRECTORY / "aten_ops_with_npu_kernels.txt"
DEVICE_API = DIRECTORY / "torch_npu_device_api.txt"
AUTOGRAD_NODES = DIRECTORY / "torch_npu_autograd_nodes.txt"
CONTIGUOUS_INPUTS = DIRECTORY / "torch_npu_contiguous_inputs.txt"
VENDOR_ROWS = DIRECTORY / "vendor_migration_rows.txt"
TORCH_NPU_RELEASES = DIRECTORY / "torch_npu_releases.yaml"


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


@dataclass(frozen=True)
class TorchNpuRelease:
    """The torch-npu release line of one torch release (``torch_npu_releases.yaml``)."""

    torch: str  # the torch release, e.g. "2.4.0"
    torch_npu: str  # the release npu-migrate pins: the newest on PyPI for this torch
    requires: Dict[str, str]  # platform -> the pinned wheel's Requires-Dist on torch
    others: Tuple[str, ...] = ()  # the other releases for this torch, newest first
    cann: Dict[str, str] = field(default_factory=dict)  # release -> the CANN version it pairs with (where listed)


def _strings(path: Path, node, what: str) -> Tuple[str, ...]:
    value = plain(node)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SchemaError(path, line_of(node), f"{what} must be a list of version strings")
    return tuple(value)


def _string_map(path: Path, node, what: str) -> Dict[str, str]:
    return {key: text(path, value, f"{what}.{key}") for key, _, value in mapping_items(path, node, what)}


@lru_cache(maxsize=None)
def torch_npu_releases(path: Path = TORCH_NPU_RELEASES) -> Dict[str, TorchNpuRelease]:
    """torch release -> its torch-npu line, from the reference table (raises ``SchemaError``)."""
    root = compose(path)
    releases = check_keys(path, root, {"releases"}, ("releases",), "the torch-npu release table")["releases"]
    if not isinstance(releases, yaml.SequenceNode):
        raise SchemaError(path, line_of(releases), "releases is a list")
    table: Dict[str, TorchNpuRelease] = {}
    for node in releases.value:
        keys = check_keys(path, node, {"torch", "torch_npu", "requires", "others", "cann"},
                          ("torch", "torch_npu", "requires"), "release")
        torch = text(path, keys["torch"], "torch")
        if torch in table:
            raise SchemaError(path, line_of(node), f"torch {torch} is listed twice")
        table[torch] = TorchNpuRelease(
            torch, text(path, keys["torch_npu"], "torch_npu"), _string_map(path, keys["requires"], "requires"),
            _strings(path, keys["others"], "others") if "others" in keys else (),
            _string_map(path, keys["cann"], "cann") if "cann" in keys else {})
    return table
