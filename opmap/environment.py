"""The environment table: what a launcher's CUDA/NCCL settings become on an Ascend NPU (the
``environment:`` section of an op-table file, e.g. ``opmap/environment.yaml``).

A record names a ``kind`` of thing a launcher holds and its ``name`` (a glob):

- ``variable``: an environment variable (``CUDA_VISIBLE_DEVICES``, ``NCCL_*``);
- ``command``: a command (``nvidia-smi``);
- ``device-count``: a way of counting the GPUs to launch on (``nvidia-smi``: a count read from its
  output, ``torchrun-gpu``: ``--nproc_per_node=gpu``, ``slurm-gpu``: Slurm's ``--gres=gpu``/``--gpus``);
- ``image``: a container base image (``nvidia/cuda:*``);
- ``value``: the literal value of a setting the table does not name (``TORCH_BACKEND=cu126``);
- ``config``: a key of a YAML/JSON configuration file (``name``: a glob over the key, lower case)
  holding a given ``value`` (a glob over the whole value as written: ``nccl``, ``cuda:*``), such as
  ``backend: nccl`` or ``accelerator: gpu``.

``status: rename`` renames the site to ``target`` where the mapping is exact: for a variable, when
its value is one ``values`` admits (``values`` below), or is set at run time and ``dynamic: rename``
says the name alone decides; for a command, where its output is only shown (not parsed, no
options); for a config value, the whole value becomes ``target``, where a ``*`` of ``target``
stands for what the ``*`` of ``value`` matched and ``values`` must admit that part. Every other site of the record, and every site of a ``status: report`` record, is
reported with the record's ``fallback`` plan. Each record says why (``reason``) and where the fact
comes from (``source``: a URL or a document section).

``values`` is one of: ``any``; ``device-ids`` (comma-separated device numbers in ascending order);
``integers A..B``; ``one of X, Y``; ``options K1, K2`` (comma-separated ``key:value`` options whose
keys are among K1, K2).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path
from typing import FrozenSet, Optional, Tuple

import yaml

from npu_migrate.opmap.records import CODE_RE, Fallback, parse_fallback, text
from npu_migrate.opmap.yaml_source import SchemaError, check_keys, line_of, plain

ENV_KINDS = ("variable", "command", "device-count", "image", "value", "config")
ENV_STATUSES = ("rename", "report")
_VALUES = re.compile(r"^(any|device-ids|integers (?P<low>\d+)\.\.(?P<high>\d+)|one of (?P<one>.+)|options (?P<opts>.+))$")


@dataclass(frozen=True)
class Values:
    """Which literal values a rename is exact for."""

    kind: str  # "any", "device-ids", "integers", "one-of", "options"
    low: int = 0
    high: int = 0
    allowed: FrozenSet[str] = frozenset()
    spelled: str = "any"

    @property
    def described(self) -> str:
        """The rule in words, for messages."""
        return {"any": "any value", "device-ids": "device IDs in ascending order",
                "integers": f"integers {self.low} to {self.high}"}.get(self.kind, self.spelled)

    def admits(self, value: str) -> bool:
        if self.kind == "any":
            return True
        if self.kind == "device-ids":
            parts = value.split(",")
            if not all(p.isdigit() for p in parts):
                return False
            numbers = [int(p) for p in parts]
            return numbers == sorted(set(numbers))
        if self.kind == "integers":
            return value.isdigit() and self.low <= int(value) <= self.high
        if self.kind == "one-of":
            return value in self.allowed
        options = [part.split(":", 1) for part in value.split(",")]
        return all(len(o) == 2 and o[0].strip() in self.allowed and o[1].strip() for o in options)


ANY = Values("any")


def parse_values(path: Path, node: yaml.Node) -> Values:
    spelled = text(path, node, "values")
    match = _VALUES.match(spelled.strip())
    if match is None:
        raise SchemaError(path, line_of(node), f"values {spelled!r} is not one of: any, device-ids, integers A..B, "
                                               "one of X, Y, options K1, K2")
    if match.group("low") is not None:
        return Values("integers", int(match.group("low")), int(match.group("high")), spelled=spelled)
    for group, kind in (("one", "one-of"), ("opts", "options")):
        if match.group(group):
            allowed = frozenset(v.strip() for v in match.group(group).split(",") if v.strip())
            return Values(kind, allowed=allowed, spelled=spelled)
    return Values(spelled.strip(), spelled=spelled)


@dataclass(frozen=True)
class EnvironmentRecord:
    kind: str  # one of ENV_KINDS
    name: str  # glob
    status: str  # one of ENV_STATUSES
    code: str
    reason: str
    source: str  # a URL or a document section
    fallback: Fallback  # the plan wherever the site is reported
    target: Optional[str] = None  # the NPU name (status rename)
    values: Values = ANY
    dynamic: bool = False  # a value set at run time is renamed too
    origin: str = ""  # "file:line" the record came from
    value: Optional[str] = None  # kind config: a glob over the key's whole value

    @property
    def key(self) -> Tuple[str, str, str]:
        return self.kind, self.name, self.value or ""

    def matches(self, kind: str, name: str) -> bool:
        return kind == self.kind and fnmatch.fnmatchcase(name, self.name)

    def renamed_value(self, value: str) -> Optional[str]:
        """A config value's new text (``target`` with the part ``*`` matched), None where the record
        does not rename this value exactly (no match, or ``values`` refuses the ``*`` part)."""
        if self.status != "rename" or self.value is None:
            return None
        match = re.fullmatch(re.escape(self.value).replace(r"\*", "(.*)"), value)
        if match is None:
            return None
        part = match.group(1) if match.groups() else ""
        if match.groups() and not self.values.admits(part):
            return None
        return self.target.replace("*", part, 1) if match.groups() else self.target

    def holds(self, value: str) -> bool:
        """A config record whose ``value`` glob matches the whole ``value``."""
        return self.value is not None and fnmatch.fnmatchcase(value, self.value)


_KEYS = {"kind", "name", "value", "status", "code", "target", "values", "dynamic", "reason", "source", "fallback"}


def parse_environment(path: Path, node: yaml.Node) -> EnvironmentRecord:
    keys = check_keys(path, node, _KEYS, ("kind", "name", "status", "code", "reason", "source", "fallback"),
                      "environment record")
    kind = text(path, keys["kind"], "kind")
    if kind not in ENV_KINDS:
        raise SchemaError(path, line_of(keys["kind"]), f"kind {kind!r} is not one of {', '.join(ENV_KINDS)}")
    name = text(path, keys["name"], "name")
    where = f"{kind} {name!r}"
    status = text(path, keys["status"], "status")
    if status not in ENV_STATUSES:
        raise SchemaError(path, line_of(keys["status"]), f"{where}: status {status!r} is not one of "
                                                         f"{', '.join(ENV_STATUSES)}")
    code = text(path, keys["code"], "code")
    if not CODE_RE.match(code):
        raise SchemaError(path, line_of(keys["code"]), f"{where}: code {code!r} must look like NPU123")
    target = text(path, keys["target"], "target") if "target" in keys else None
    if status == "rename" and target is None:
        raise SchemaError(path, line_of(node), f"{where}: status 'rename' needs a target")
    dynamic = plain(keys["dynamic"]) if "dynamic" in keys else False
    if not isinstance(dynamic, bool):
        raise SchemaError(path, line_of(keys["dynamic"]), f"{where}: dynamic must be true or false")
    value = text(path, keys["value"], "value") if "value" in keys else None
    if (value is None) != (kind != "config"):
        raise SchemaError(path, line_of(node), f"{where}: a value glob is given for kind config, and only for it")
    if kind == "config" and status == "rename" and target.count("*") > (value.count("*") == 1):
        raise SchemaError(path, line_of(keys["target"]), f"{where}: a * in target needs exactly one * in value")
    return EnvironmentRecord(kind, name, status, code, text(path, keys["reason"], "reason"),
                             text(path, keys["source"], "source"), parse_fallback(path, keys["fallback"]),
                             target=target, values=parse_values(path, keys["values"]) if "values" in keys else ANY,
                             dynamic=dynamic, origin=f"{path}:{line_of(node)}", value=value)
