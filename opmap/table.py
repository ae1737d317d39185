"""Loading the op table: the YAML files shipped in this package, then the user's ``--opmap`` files.

A file is a list of op records, or a mapping of sections: ``records`` (op records, one per torch
API), ``packages`` and ``indexes`` (the package table, ``opmap.packages``), ``environment``
(launcher settings, ``opmap.environment``) and, in the built-in files only, ``plans`` (named plans
the rules read at import, ``opmap.plans``). A later file overrides an earlier record with the same
key (``api``; ``package`` + ``local``; ``index``; ``kind`` + ``name``); within one file a repeated key is
an error. Op lookup is exact first, then the longest ``prefix.*`` record; package, index and
environment lookup is the most specific matching glob (an exact name first; ties: the later record).
"""

from __future__ import annotations

from pathlib import Path
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence

import yaml

from . import builtin_files, is_builtin
from .environment import EnvironmentRecord, parse_environment
from .packages import IndexRecord, PackageRecord, normalise, parse_index, parse_package, specificity
from .records import NamedPlan, OpRecord, parse_plan, parse_record
from .yaml_source import SchemaError, check_keys, compose, line_of


@dataclass
class Sections:
    """The records of one op-table file, by section."""

    records: List[OpRecord] = field(default_factory=list)
    packages: List[PackageRecord] = field(default_factory=list)
    indexes: List[IndexRecord] = field(default_factory=list)
    environment: List[EnvironmentRecord] = field(default_factory=list)
    plans: List[NamedPlan] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.records) + len(self.packages) + len(self.indexes) + len(self.environment) + len(self.plans)


# section -> (parse one record, its key, what the key is called in an error)
_SECTIONS: Dict[str, tuple] = {
    "records": (parse_record, lambda r: r.api, "api"),
    "packages": (parse_package, lambda r: r.package + (f"+{r.local}" if r.local else ""), "package"),
    "indexes": (parse_index, lambda r: r.index, "index"),
    "environment": (parse_environment, lambda r: " ".join(filter(None, (r.kind, r.name, r.value))),
                    "environment record"),
    "plans": (parse_plan, lambda r: r.name, "plan"),
}
USER_PLANS = ("a plans section is read only from the built-in op table (the rules take their named plans "
              "at import); override a record's fallback instead")


def _section(path: Path, node: yaml.Node, name: str) -> list:
    parse, key_of, what = _SECTIONS[name]
    if not isinstance(node, yaml.SequenceNode):
        raise SchemaError(path, line_of(node), f"section {name!r} is a list of records")
    records, seen = [], {}
    for item in node.value:
        record = parse(path, item)
        key = key_of(record)
        if key in seen:
            raise SchemaError(path, line_of(item), f"{what} {key!r} is defined twice (first at line {seen[key]})")
        seen[key] = line_of(item)
        records.append(record)
    return records


def load_sections(path: Path) -> Sections:
    """Every record of one YAML file: a list of op records, or a mapping of sections."""
    path = Path(path)
    root = compose(path)
    if root is None:
        return Sections()
    if isinstance(root, yaml.MappingNode):  # a repeated section is refused by compose()
        keys = check_keys(path, root, set(_SECTIONS), (), "the op table file")
        if not keys:
            raise SchemaError(path, line_of(root), f"an op table file has at least one of the sections "
                                                   f"{', '.join(_SECTIONS)}")
        if "plans" in keys and not is_builtin(path):
            raise SchemaError(path, line_of(keys["plans"]), USER_PLANS)
        return Sections(**{name: _section(path, node, name) for name, node in keys.items()})
    if not isinstance(root, yaml.SequenceNode):
        raise SchemaError(path, line_of(root), "an op table file is a list of records")
    return Sections(records=_section(path, root, "records"))


def load_file(path: Path) -> List[OpRecord]:
    """The op records of one YAML file (its other sections are checked too)."""
    return load_sections(path).records


def _most_specific(records: Iterable, pattern_of: Callable, matches: Callable):
    """The matching record with the most specific pattern (later records win ties)."""
    best, best_rank = None, -1
    for record in records:
        if matches(record):
            rank = specificity(pattern_of(record))
            if rank >= best_rank:
                best, best_rank = record, rank
    return best


class OpTable:
    def __init__(self, records: Iterable[OpRecord] = ()):
        self._exact: Dict[str, OpRecord] = {}
        self._prefix: Dict[str, OpRecord] = {}
        self._packages: Dict[tuple, PackageRecord] = {}
        self._indexes: Dict[str, IndexRecord] = {}
        self._environment: Dict[tuple, EnvironmentRecord] = {}
        self._plans: Dict[str, NamedPlan] = {}
        for record in records:
            self.add(record)

    def add_sections(self, sections: Sections) -> None:
        for record in sections.records:
            self.add(record)
        for package in sections.packages:
            self._packages.pop(package.key, None)  # re-added last: a later file wins ties
            self._packages[package.key] = package
        for index in sections.indexes:
            self._indexes.pop(index.index, None)
            self._indexes[index.index] = index
        for env in sections.environment:
            self._environment.pop(env.key, None)
            self._environment[env.key] = env
        self._plans.update((named.name, named) for named in sections.plans)

    def package(self, name: str, local: Optional[str] = None) -> Optional[PackageRecord]:
        """The package record for a distribution (any spelling of its name) and the local label of
        its pinned build: records with a matching ``local`` come before those without."""
        name = normalise(name)
        candidates = [r for r in self._packages.values() if r.matches(name, local)]
        with_local = [r for r in candidates if r.local is not None]
        return _most_specific(with_local or candidates, lambda r: r.package, lambda r: True)

    def index(self, url: str) -> Optional[IndexRecord]:
        return _most_specific(self._indexes.values(), lambda r: r.index, lambda r: r.matches(url))

    def environment(self, kind: str, name: str) -> Optional[EnvironmentRecord]:
        return _most_specific(self._environment.values(), lambda r: r.name, lambda r: r.matches(kind, name))

    def config(self, key: str, value: str) -> Optional[EnvironmentRecord]:
        """The ``config`` record of a configuration key (lower case) holding ``value``: the most
        specific value glob first, then the most specific key glob (ties: the later record)."""
        best, best_rank = None, None
        for record in self._environment.values():
            if record.matches("config", key) and record.holds(value):
                rank = (specificity(record.value), specificity(record.name))
                if best_rank is None or rank >= best_rank:
                    best, best_rank = record, rank
        return best

    def packages(self) -> List[PackageRecord]:
        return list(self._packages.values())

    def indexes(self) -> List[IndexRecord]:
        return list(self._indexes.values())

    def environment_records(self) -> List[EnvironmentRecord]:
        return list(self._environment.values())

    def plan(self, name: str) -> Optional[NamedPlan]:
        """The named plan ``<file stem>.<name>`` (``attention.underflow``), None when none has it."""
        return self._plans.get(name)

    def plans(self) -> List[NamedPlan]:
        return sorted(self._plans.values(), key=lambda named: named.name)

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
        table.add_sections(load_sections(path))
    return table
