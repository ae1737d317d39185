"""The result cache: a file whose bytes were migrated before, with the same tool, op table and options,
gets its stored result instead of being parsed again (like ruff's cache).

Key: sha256 over a *salt* (the tool version and the hash of its own source files, including every
rule's module, the op-table YAML files' bytes and the reference tables the dependency files read,
the selected/ignored codes and the per-file limits)
and the file's path, bytes and package flag. The value is the file's result (status, findings,
migrated text, helpers) as JSON, never pickle: a cache directory is not trusted. An entry is used
only when it parses, has this format and version, repeats its own key, carries a checksum that
matches its body and every field has the expected type; anything else (corrupt, truncated,
foreign, older format) is ignored and overwritten. Entries are written atomically (temporary
file, then rename), so concurrent runs and workers never see half an entry. Results that depend on
the machine's load (time-budget errors) and worker crashes are never stored.

A cache directory that another user owns or can write is not used at all (``unsafe``).
Layout: ``<cache-dir>/v<VERSION>/<key[:2]>/<key>.json``. The default directory is
``$NPU_MIGRATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/npu-migrate``, else ``~/.cache/npu-migrate``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Iterable, Optional, Sequence

from npu_migrate.migrate import __version__, diagnostics
from npu_migrate.migrate.findings import ACTIONS, FILE_STATUSES, PACKAGE_STATUSES, FileResult, Finding, Requirement
from npu_migrate.opmap import Fallback

FORMAT = "npu-migrate-cache"
VERSION = 3  # 3: a result's file kind and declared requirements; 2: findings carry a notebook cell
_PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the folder holding migrate/, opmap/, kernels/
UNCACHED = {diagnostics.TIMED_OUT, diagnostics.WORKER_DIED, diagnostics.READ_ERROR, diagnostics.TOO_LARGE}


def default_dir() -> Path:
    explicit = os.environ.get("NPU_MIGRATE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "npu-migrate"


def _tool_files() -> Iterable[Path]:
    for package in ("migrate", "opmap"):
        yield from sorted((_PACKAGE_ROOT / package).rglob("*.py"))
    yield from sorted((_PACKAGE_ROOT / "opmap" / "reference").glob("*.yaml"))  # the torch-npu release table


def salt(table_files: Sequence[Path], rules: Sequence[type], select, ignore, limits) -> str:
    """Everything besides the file itself that decides a file's result."""
    h = hashlib.sha256(f"{FORMAT} {VERSION} {__version__}\n".encode())
    rule_files = {inspect.getsourcefile(rule) or "" for rule in rules}
    for path in [*_tool_files(), *map(Path, table_files), *sorted(map(Path, filter(None, rule_files)))]:
        h.update(str(path).encode() + b"\0")
        with suppress(OSError):
            h.update(hashlib.sha256(path.read_bytes()).digest())
    rules_seen = sorted(f"{r.__module__}.{r.__qualname__}:{','.join(r.all_codes())}" for r in rules)
    h.update(json.dumps([rules_seen, sorted(select or []), sorted(ignore or []),
                         limits.max_bytes, limits.max_seconds]).encode())
    return h.hexdigest()


def _finding_json(f: Finding) -> dict:
    return f.to_json()


def _checksum(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()


def _optional(value, kind) -> bool:
    return value is None or isinstance(value, kind)


def _finding(data) -> Optional[Finding]:
    if not isinstance(data, dict):
        return None
    strings = ("code", "message", "action", "path")
    if not all(isinstance(data.get(k), str) for k in strings) or data["action"] not in ACTIONS:
        return None
    if not all(_optional(data.get(k), str) for k in ("api", "target")):
        return None
    if not all(isinstance(data.get(k), int) and not isinstance(data.get(k), bool) for k in ("line", "col")):
        return None
    fallback = data.get("fallback")
    if fallback is not None:
        if not (isinstance(fallback, dict) and set(fallback) == {"plan", "detail"}
                and all(isinstance(v, str) for v in fallback.values())):
            return None
        fallback = Fallback(fallback["plan"], fallback["detail"])
    cell = data.get("cell")
    if cell is not None and (not isinstance(cell, int) or isinstance(cell, bool)):
        return None
    return Finding(data["code"], data["message"], data["action"], api=data.get("api"), target=data.get("target"),
                   fallback=fallback, path=data["path"], line=data["line"], col=data["col"], cell=cell)


def _requirement(data) -> Optional[Requirement]:
    if not (isinstance(data, dict) and set(data) == {"name", "spec", "line", "status", "group", "replacement"}):
        return None
    if not all(isinstance(data[k], str) for k in ("name", "spec", "status", "group")) \
            or data["status"] not in PACKAGE_STATUSES or not _optional(data["replacement"], str):
        return None
    if not isinstance(data["line"], int) or isinstance(data["line"], bool):
        return None
    return Requirement(**data)


def unsafe(directory: Path) -> Optional[str]:
    """Why ``directory`` must not be used as a cache (None when it may): it is created private
    (0700); one owned by another user or writable by others could be fed entries by them."""
    try:
        Path(directory).mkdir(parents=True, exist_ok=True, mode=0o700)
        info = os.stat(directory)
    except OSError as exc:
        return f"cannot use the cache directory {directory}: {exc.strerror}"
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"the cache directory {directory} belongs to another user; not used"
    if info.st_mode & 0o022:
        return f"the cache directory {directory} is writable by other users; not used"
    return None


class Cache:
    def __init__(self, directory: Path, salt_: str) -> None:
        self.directory = Path(directory) / f"v{VERSION}"
        self.salt = salt_

    def key(self, path: str, digest: str, context: str = "") -> str:
        """``context``: what else decides this file's result (its per-file ignores, first-party names)."""
        return hashlib.sha256(f"{self.salt}\0{path}\0{digest}\0{context}".encode(
            "utf-8", "surrogateescape")).hexdigest()

    def _entry(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str, data: bytes) -> Optional[FileResult]:
        """The stored result for ``key`` (whose file holds ``data``), or None if absent or not valid."""
        try:
            raw = self._entry(key).read_bytes()
            entry = json.loads(raw.decode("utf-8"))
        except (OSError, ValueError):
            return None
        if not (isinstance(entry, dict) and entry.get("format") == FORMAT and entry.get("version") == VERSION
                and entry.get("key") == key and isinstance(entry.get("result"), dict)
                and entry.get("checksum") == _checksum(entry["result"])):
            return None
        return _result(entry["result"], data)

    def put(self, key: str, result: FileResult) -> None:
        """Store ``result`` (best effort: a cache that cannot be written only costs speed)."""
        if any(f.code in UNCACHED for f in result.findings):
            return
        body = {"path": result.path, "status": result.status, "error": result.error, "migrated": result.migrated,
                "diff": result.diff, "helpers": list(result.helpers), "digest": result.digest,
                "findings": [_finding_json(f) for f in result.findings], "kind": result.kind,
                "requirements": [r.to_json() for r in result.requirements]}
        entry = {"format": FORMAT, "version": VERSION, "key": key, "checksum": _checksum(body), "result": body}
        target = self._entry(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{key[:8]}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(json.dumps(entry).encode("utf-8"))
                os.replace(tmp, target)
            except BaseException:
                with suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            pass


def _result(body: dict, data: bytes) -> Optional[FileResult]:
    """A ``FileResult`` from a stored body, or None when any field is not what it must be."""
    status, migrated, helpers = body.get("status"), body.get("migrated"), body.get("helpers")
    if status not in FILE_STATUSES or not isinstance(body.get("path"), str) or not _optional(body.get("error"), str):
        return None
    if not (isinstance(helpers, list) and all(isinstance(h, str) and h.isidentifier() for h in helpers)):
        return None
    if body.get("digest") != hashlib.sha256(data).hexdigest() or not isinstance(body.get("findings"), list):
        return None
    findings = [_finding(f) for f in body["findings"]]
    if any(f is None for f in findings):
        return None
    kind, requirements = body.get("kind"), body.get("requirements")
    if not isinstance(kind, str) or not isinstance(requirements, list):
        return None
    requirements = [_requirement(r) for r in requirements]
    if any(r is None for r in requirements):
        return None
    original, diff = None, body.get("diff")
    if status == "changed":
        if not (isinstance(migrated, str) and isinstance(diff, str)):
            return None
        try:
            original = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    elif migrated is not None or diff is not None:
        return None
    return FileResult(body["path"], status, findings, error=body.get("error"), original=original, migrated=migrated,
                      helpers=helpers, digest=body["digest"], diff=diff, kind=kind, requirements=requirements)
