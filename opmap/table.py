"""Loading the op table: the YAML files shipped in this package, then the user's ``--opmap`` files.

A later file overrides an earlier record with the same ``api``; within one file a repeated api is
an error. Lookup is exact first, then the longest ``prefix.*`` record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

import yaml

from npu_migrate.opmap.records import OpRecord, parse_record
from npu_migrate.opmap.yaml_source import SchemaError, check_keys, compose, line_of

BUILTIN_DIR = Path(__file__).parent


def builtin_files() -> List[Path]:
    return sorted(BUILTIN_DIR.glob("*.yaml"))


def load_file(path: Path) -> List[OpRecord]:
    """Records of one YAML file: a list of records (or a mapping with a ``records`` list)."""
    path = Path(path)
    root = compose(path)
    if root is None:
        return []
    if isinstance(root, yaml.MappingNode):  # a repeated ``records:`` is refused by compose()
        root = check_keys(path, root, {"records"}, ("records",), "the op table file")["records"]
    if not isinstance(root, yaml.SequenceNode):
        raise SchemaError(path, line_of(root), "an op table file is a list of records")
    records, seen = [], {}
    for node in root.value:
        record = parse_record(path, node)
        if record.api in seen:
            raise SchemaError(path, line_of(node), f"api {record.api!r} is defined twice (first at line {seen[record.api]})")
        seen[record.api] = line_of(node)
        records.append(record)
    return records


class OpTable:
    def __init__(self, records: Iterable[OpRecord] = ()):
        self._exact: Dict[str, OpRecord] = {}
        self._prefix: Dict[str, OpRecord] = {}
        for record in records:
            self.add(record)

    def add(self, record: OpRecord) -> None:
        if record.is_prefix:
            self._prefix[record.api[:-2]] = record
        else:
            self._exact[record.api] = record

    def get(self, api: str) -> Optional[OpRecord]:
        """The record for a qualified name: exact match, else the longest covering prefix record."""
        record = self._exact.get(api)
        if record is not None:
            return record
        parts = api.split(".")
        for end in range(len(parts) - 1, 0, -1):
            record = self._prefix.get(".".join(parts[:end]))
            if record is not None:
                return record
        return None

    def exact(self, api: str) -> Optional[OpRecord]:
        return self._exact.get(api) or self._prefix.get(api[:-2] if api.endswith(".*") else "")

    def records(self) -> List[OpRecord]:
        return sorted([*self._exact.values(), *self._prefix.values()], key=lambda r: r.api)


def load_table(extra_files: Sequence[Path] = ()) -> OpTable:
    """The built-in table extended/overridden by ``extra_files`` (raises ``SchemaError``)."""
    table = OpTable()
    for path in [*builtin_files(), *map(Path, extra_files)]:
        for record in load_file(path):
            table.add(record)
    return table
