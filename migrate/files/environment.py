"""What a launcher's CUDA/NCCL settings become, decided by the op table's environment records
(``opmap/environment.yaml``), whatever file kind found them.

A ``Launcher`` collects one file's sites and decides them together in ``finish``: a variable
with a ``rename`` record is renamed at every assignment and reference when every assignment in
the file has a value the record admits (or is set at run time and the record renames those too);
otherwise all of them are reported, so that a script never reads a name it no longer sets. A
variable with a ``report`` record, a command used in a way the record cannot rename, a GPU count
and a CUDA base image are reported with the record's plan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional

from npu_migrate.migrate.files.base import Scan, TextEdit
from npu_migrate.migrate.files.declared import Declared
from npu_migrate.migrate.files.packages import check_index, check_packages
from npu_migrate.opmap import EnvironmentRecord
from npu_migrate.opmap.packages import normalise


_DEFAULT = re.compile(r"""^"?\$\{[A-Za-z_][A-Za-z0-9_]*:?[-=](?P<default>[^}$`"']*)\}"?$""")


@dataclass(frozen=True)
class Use:
    """One place a variable's name occurs: an assignment (``value`` is its literal value, or None
    when set at run time) or a reference."""

    name: str
    start: int  # offsets of the name
    end: int
    assigned: bool
    value: Optional[str] = None
    default: Optional[str] = None  # a value set at run time as ${NAME:-default}: its literal default


class Launcher:
    """``kept``: why this file's variables are never renamed (None: they are renamed where exact), e.g.
    a compose file's build arguments, which the Dockerfile's ``ARG`` of the same name reads."""

    def __init__(self, scan: Scan, kept: Optional[str] = None) -> None:
        self.scan, self.kept = scan, kept
        self.uses: List[Use] = []
        self.packages: List[Declared] = []
        self._images = set()

    # -- collecting -------------------------------------------------------------------------------
    def assign(self, name: str, start: int, value: Optional[str], raw: str = "") -> None:
        """``value``: the literal value, None when set at run time (``raw``: the value as written)."""
        default = _DEFAULT.match(raw) if value is None and raw else None
        self.uses.append(Use(name, start, start + len(name), True, value,
                             default.group("default") if default else None))

    def refer(self, name: str, start: int) -> None:
        self.uses.append(Use(name, start, start + len(name), False))

    def command(self, name: str, start: int, end: int, informational: bool, why: str) -> None:
        """A command (``nvidia-smi``) at ``text[start:end]``; renamed only when ``informational``."""
        record = self.scan.table.environment("command", name)
        if record is None:
            return
        if record.status == "rename" and informational:
            self.scan.rewrite(start, record.code, f"{name} → {record.target} (its output is only shown)",
                              [TextEdit(start, end, record.target)], target=record.target, api=name)
        elif record.status == "rename":
            self.scan.report(start, record.code, f"{name} {why}: not renamed to {record.target}", record.fallback,
                             api=name)
        else:
            self.scan.report(start, record.code, f"{name}: {record.reason}", record.fallback, api=name)

    def device_count(self, how: str, at: int, seen: str) -> None:
        record = self.scan.table.environment("device-count", how)
        if record is not None:
            self.scan.report(at, record.code, f"{seen}: {record.reason}", record.fallback, api=how)

    def image(self, image: str, at: int, via: str = "") -> None:
        record = self.scan.table.environment("image", image.lower())
        if record is not None and (image, at) not in self._images:
            self._images.add((image, at))
            self.scan.report(at, record.code, f"base image {image}{via}: {record.reason}", record.fallback, api=image)

    def package(self, item: Optional[Declared]) -> None:
        if item is not None:
            self.packages.append(item)

    def system_package(self, spec: str, at: int, group: str) -> None:
        """An apt/yum package: kept only when the package table has a record for its name (libnccl2,
        cuda-toolkit-12-1, libcudnn8), so the matrix lists the NVIDIA ones, not every system tool."""
        name = spec.split("=", 1)[0]
        if self.scan.table.package(name) is not None:
            self.packages.append(Declared(normalise(name), spec, at, group, ecosystem="system"))

    def index(self, url: str, at: int) -> None:
        check_index(self.scan, url, at)

    # -- deciding ---------------------------------------------------------------------------------
    def finish(self) -> None:
        by_name: Dict[str, List[Use]] = {}
        for use in self.uses:
            by_name.setdefault(use.name, []).append(use)
        for name, uses in by_name.items():
            record = self.scan.table.environment("variable", name)
            if record is not None:
                self._variable(record, name, uses)
            else:
                self._values(name, uses)
        if self.packages:
            check_packages(self.scan, self.packages)

    def _variable(self, record: EnvironmentRecord, name: str, uses: List[Use]) -> None:
        assignments = [u for u in uses if u.assigned]
        refused = [u for u in assignments if not self._exact(record, u)]
        if record.status == "rename" and not refused and self.kept is None:
            for use in uses:
                how = _how(use, record)
                self.scan.rewrite(use.start, record.code, f"{name} → {record.target}{how}",
                                  [TextEdit(use.start, use.end, record.target)], target=record.target, api=name)
            return
        reported_lines = set()
        for use in sorted(uses, key=lambda u: (not u.assigned, u.start)):  # on a line: the assignment says why
            line = self.scan.line(use.start)
            if line in reported_lines:
                continue
            reported_lines.add(line)
            self.scan.report(use.start, record.code, self._why(record, name, use, refused), record.fallback, api=name)

    def _values(self, name: str, uses: List[Use]) -> None:
        """A setting the table does not name whose literal value selects CUDA (``TORCH_BACKEND=cu126``)."""
        for use in uses:
            value = use.value if use.value is not None else use.default
            record = self.scan.table.environment("value", value.lower()) if use.assigned and value else None
            if record is not None:
                self.scan.report(use.start, record.code, f"{name}={value}: {record.reason}", record.fallback, api=name)

    def _exact(self, record: EnvironmentRecord, use: Use) -> bool:
        if use.value is None:
            return record.dynamic and (use.default is None or record.values.admits(use.default))
        return record.values.admits(use.value)

    def _why(self, record: EnvironmentRecord, name: str, use: Use, refused: List[Use]) -> str:
        if record.status != "rename":
            return f"{name}: {record.reason}"
        if self.kept is not None:
            return f"{name} not renamed to {record.target}: {self.kept}"
        if use in refused:
            value = f"value {use.value!r}" if use.value is not None else \
                f"default {use.default!r}" if use.default is not None and record.dynamic else "a value set at run time"
            return (f"{name} not renamed to {record.target}: {value} is not one the rename is exact for "
                    f"({record.values.described}): {record.reason}")
        first = self.scan.line(refused[0].start)
        return f"{name} not renamed to {record.target}: kept like its assignment on line {first}, which is not renamed"


def _how(use: Use, record: EnvironmentRecord) -> str:
    if not use.assigned:
        return ""
    if use.value is None:
        return f" (value set at run time: {record.target} takes {record.values.described})" \
            if record.values.kind != "any" else ""
    return ""
