"""The package table: what a declared dependency becomes on an Ascend NPU (``packages:`` and
``indexes:`` sections of an op-table file, e.g. ``opmap/packages.yaml``).

A package record names a distribution (its PEP 503 normalised name, or a glob such as ``nvidia-*``),
optionally only its builds whose local version label (``torch==2.4.0+cu121``) or conda build string
matches ``local``. Its status:

- ``compatible``: works on an NPU as it is; ``version`` (a PEP 440 specifier), when given, is the set
  of releases that do, and a declaration pinned outside it is reported with the record's plan;
- ``replace``: an NPU counterpart exists (``replacement``), the declaration is reported with the plan;
- ``unsupported``: nothing on an NPU does what it does; reported with the plan.

An index record names a package index or conda channel (a glob over the URL without its scheme, or
a channel name) that serves CUDA builds. Every record says why (``reason``) and where the fact comes
from (``source``: a URL or a document section).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

import yaml

from npu_migrate.opmap.records import CODE_RE, Fallback, parse_fallback, text
from npu_migrate.opmap.yaml_source import SchemaError, check_keys, line_of, plain

PACKAGE_STATUSES = ("compatible", "replace", "unsupported")
INDEX_STATUSES = ("replace", "unsupported")
_NAME = re.compile(r"^[a-z0-9*?]([a-z0-9*?.-]*[a-z0-9*?])?$")


def normalise(name: str) -> str:
    """PEP 503: lowercase, runs of ``-``, ``_`` and ``.`` become one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def specificity(pattern: str) -> int:
    """How specific a glob is: its count of literal characters (an exact name beats any glob)."""
    return len(pattern.replace("*", "").replace("?", "")) + (1000 if not any(c in pattern for c in "*?") else 0)


@dataclass(frozen=True)
class PackageRecord:
    package: str  # normalised name or glob
    status: str  # one of PACKAGE_STATUSES
    reason: str
    source: str  # a URL or a document section
    code: Optional[str] = None
    replacement: Optional[str] = None
    version: Optional[str] = None  # PEP 440 specifier of the releases that work (compatible records)
    local: Optional[str] = None  # glob over a build's local label / conda build string ("cu*")
    fallback: Optional[Fallback] = None
    origin: str = ""  # "file:line" the record came from

    @property
    def key(self) -> Tuple[str, Optional[str]]:
        return self.package, self.local

    def matches(self, name: str, local: Optional[str]) -> bool:
        if not fnmatch.fnmatchcase(name, self.package):
            return False
        return self.local is None or (local is not None and fnmatch.fnmatchcase(local.lower(), self.local))


@dataclass(frozen=True)
class IndexRecord:
    index: str  # glob over the URL without its scheme, or a conda channel name
    status: str  # one of INDEX_STATUSES
    code: str
    reason: str
    source: str
    fallback: Fallback
    replacement: Optional[str] = None
    origin: str = ""

    def matches(self, url: str) -> bool:
        bare = re.sub(r"^[a-z+]+://", "", url.strip().lower()).rstrip("/")
        return fnmatch.fnmatchcase(bare, self.index) or fnmatch.fnmatchcase(bare + "/", self.index)


_PACKAGE_KEYS = {"package", "local", "status", "code", "replacement", "version", "reason", "source", "fallback"}
_INDEX_KEYS = {"index", "status", "code", "replacement", "reason", "source", "fallback"}


def _code(path: Path, keys, where: str) -> Optional[str]:
    if "code" not in keys:
        return None
    code = text(path, keys["code"], "code")
    if not CODE_RE.match(code):
        raise SchemaError(path, line_of(keys["code"]), f"{where}: code {code!r} must look like NPU123")
    return code


def parse_package(path: Path, node: yaml.Node) -> PackageRecord:
    keys = check_keys(path, node, _PACKAGE_KEYS, ("package", "status", "reason", "source"), "package record")
    name = text(path, keys["package"], "package")
    if not _NAME.match(name) or normalise(name) != name:
        raise SchemaError(path, line_of(keys["package"]), f"package {name!r} is not a normalised distribution name "
                                                          f"(lowercase, '-' between words; '*' globs allowed)")
    where = f"package {name!r}"
    status = text(path, keys["status"], "status")
    if status not in PACKAGE_STATUSES:
        raise SchemaError(path, line_of(keys["status"]), f"{where}: status {status!r} is not one of "
                                                         f"{', '.join(PACKAGE_STATUSES)}")
    code = _code(path, keys, where)
    fallback = parse_fallback(path, keys["fallback"]) if "fallback" in keys else None
    version = text(path, keys["version"], "version") if "version" in keys else None
    if version is not None:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            SpecifierSet(version)
        except InvalidSpecifier:
            raise SchemaError(path, line_of(keys["version"]), f"{where}: version {version!r} is not a PEP 440 "
                                                              "specifier (like >=0.10.1)") from None
    reported = status != "compatible" or version is not None
    if reported and (code is None or fallback is None):
        raise SchemaError(path, line_of(node), f"{where}: a {status} record{' with a version rule' if version else ''}"
                                               " needs a diagnostic code and a fallback plan (plan + detail)")
    replacement = text(path, keys["replacement"], "replacement") if "replacement" in keys else None
    if status == "replace" and replacement is None:
        raise SchemaError(path, line_of(node), f"{where}: status 'replace' needs a replacement")
    local = text(path, keys["local"], "local").lower() if "local" in keys else None
    return PackageRecord(name, status, text(path, keys["reason"], "reason"), text(path, keys["source"], "source"),
                         code=code, replacement=replacement, version=version, local=local, fallback=fallback,
                         origin=f"{path}:{line_of(node)}")


def parse_index(path: Path, node: yaml.Node) -> IndexRecord:
    keys = check_keys(path, node, _INDEX_KEYS, ("index", "status", "code", "reason", "source", "fallback"),
                      "index record")
    index = text(path, keys["index"], "index").lower()
    where = f"index {index!r}"
    status = text(path, keys["status"], "status")
    if status not in INDEX_STATUSES:
        raise SchemaError(path, line_of(keys["status"]), f"{where}: status {status!r} is not one of "
                                                         f"{', '.join(INDEX_STATUSES)}")
    replacement = plain(keys["replacement"]) if "replacement" in keys else None
    if replacement is not None and not isinstance(replacement, str):
        raise SchemaError(path, line_of(keys["replacement"]), f"{where}: replacement must be a string")
    return IndexRecord(index, status, _code(path, keys, where), text(path, keys["reason"], "reason"),
                       text(path, keys["source"], "source"), parse_fallback(path, keys["fallback"]),
                       replacement=replacement, origin=f"{path}:{line_of(node)}")
