"""The result cache: a file whose bytes were migrated before, with the same tool, op table and options,
gets its stored result instead of being parsed again (like ruff's cache).

Key: sha256 over a *salt* (the tool version and the hash of its own source files, including every
rule's module, the op-table YAML files' bytes and the reference tables the dependency files
read, the selected/ignored codes and the per-file limits)
and the file's path, bytes and context (its per-file ignores, first-party names). The value is the
file's result (status, findings, migrated text, helpers) as JSON, never pickle. The migrated text is the only text stored: the
patch and the reports are made from it again (never from a stored diff, which could disagree with
the tree written from the text).

A cache directory is not trusted, since its entries become code in the user's tree:

- every directory the cache creates is 0700 whatever the umask; a directory (the cache's own, or
  one on the way to an entry) that another user owns or can write is not used (``unsafe``);
- an entry is opened without following a link, and used only when it is a regular file owned by
  this user, not writable by others, and at most ``max_entry_bytes`` (a FIFO or a link to
  ``/dev/zero`` is never read);
- it carries an HMAC-SHA256 of its body under a secret key (``<cache-dir>/v<VERSION>/key``, 32 random
  bytes, 0600, made once), so an entry nobody with this user's key wrote is refused; it must also
  parse, have this format and version, repeat its own key and every field must have the expected
  type. Anything else (corrupt, truncated, foreign, older format) is ignored and overwritten.

Entries are written atomically (temporary file, then rename), so concurrent runs and workers
never see half an entry. Results that depend on the machine's load (time-budget errors) and
worker crashes are never stored. Layout: ``<cache-dir>/v<VERSION>/<key[:2]>/<key>.json``. The default
directory is ``$NPU_MIGRATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/npu-migrate``, else
``~/.cache/npu-migrate``.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import json
import os
import secrets
import stat
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Dict, Iterable, Optional, Sequence

from . import __version__, diagnostics
from .diagnostics import DiagnosticCode
from .findings import ACTIONS, FILE_STATUSES, PACKAGE_STATUSES, FileResult, Finding, Requirement
from .limits import Limits
from ..opmap import Fallback

FORMAT = "npu-migrate-cache"
VERSION = 4  # 2: findings carry a notebook cell; 3: no stored diff, an HMAC instead of a plain checksum;
# 4: a result's file kind and declared requirements
KEY_BYTES = 32
ENTRY_FACTOR = 16  # an entry may be this many times the file-size limit (JSON escapes, findings) ...
ENTRY_SLACK = 1 << 20  # ... plus this
_OPEN_ENTRY = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
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


def salt(table_files: Sequence[Path], rules: Sequence[type], select, ignore, limits, triage: bool = True) -> str:
    """Everything besides the file itself that decides a file's result. The rules of this package
    are part of the tool's own source (hashed whole); ``rules`` names any others, and may be empty
    (so that a run whose results are all cached never imports the rules)."""
    h = hashlib.sha256(f"{FORMAT} {VERSION} {__version__}\n".encode())
    rule_files = {inspect.getsourcefile(rule) or "" for rule in rules}
    for path in [*_tool_files(), *map(Path, table_files), *sorted(map(Path, filter(None, rule_files)))]:
        h.update(str(path).encode() + b"\0")
        with suppress(OSError):
            h.update(hashlib.sha256(path.read_bytes()).digest())
    rules_seen = sorted(f"{r.__module__}.{r.__qualname__}:{','.join(r.all_codes())}" for r in rules)
    h.update(json.dumps([rules_seen, sorted(select or []), sorted(ignore or []),
                         limits.max_bytes, limits.max_seconds, triage]).encode())
    return h.hexdigest()


def _finding_json(f: Finding) -> dict:
    return f.to_json()


def _signature(secret: bytes, body: dict) -> str:
    text = json.dumps(body, sort_keys=True).encode("utf-8", "surrogatepass")
    return hmac.new(secret, text, hashlib.sha256).hexdigest()


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


def _foreign(info: os.stat_result) -> Optional[str]:
    """Why a file or directory with this ``stat`` may have been written by someone else."""
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return "belongs to another user"
    if info.st_mode & 0o022:
        return "is writable by other users"
    return None


def _private_dir(path: Path) -> None:
    """``path`` as a directory of this user's, 0700 when this call creates it (whatever the umask);
    OSError when it cannot be, or when it is a link, or is not private."""
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # the umask may have taken the owner's bits too
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise OSError(f"{path} is not a directory (a link or a file)")
    problem = _foreign(info)
    if problem:
        raise OSError(f"{path} {problem}")


def unsafe(directory: Path) -> Optional[str]:
    """Why ``directory`` must not be used as a cache (None when it may): it is created private
    (0700); one owned by another user or writable by others could be fed entries by them."""
    directory = Path(directory)
    try:
        if not directory.is_dir():
            directory.parent.mkdir(parents=True, exist_ok=True)
            _private_dir(directory)
        info = os.stat(directory)
    except OSError as exc:
        return f"cannot use the cache directory {directory}: {exc.strerror or exc}"
    problem = _foreign(info)
    if problem:
        return f"the cache directory {directory} {problem}; not used"
    return None


def _secret(directory: Path) -> bytes:
    """The key that signs this user's entries in ``directory`` (made once, atomically); OSError
    when it cannot be made or is not this user's private regular file."""
    path = directory / "key"
    try:
        fd = os.open(path, _OPEN_ENTRY)
    except FileNotFoundError:
        fd_new, tmp = tempfile.mkstemp(dir=directory, prefix=".key.")
        try:
            os.write(fd_new, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd_new)
            os.close(fd_new)
            with suppress(FileExistsError):
                os.link(tmp, path)  # never replaces: a run that made it first wins
        finally:
            with suppress(OSError):
                os.unlink(tmp)
        fd = os.open(path, _OPEN_ENTRY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != KEY_BYTES or info.st_mode & 0o077 or _foreign(info):
            raise OSError(f"{path} is not a private {KEY_BYTES}-byte file of this user")
        data = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != KEY_BYTES:
        raise OSError(f"{path} could not be read whole")
    return data


class Cache:
    """The cache in ``directory``; ``problem`` says why it is not used (then nothing is read or written)."""

    def __init__(self, directory: Path, salt_: str, max_bytes: int = Limits().max_bytes) -> None:
        self.root = Path(directory)
        self.directory = self.root / f"v{VERSION}"
        self.salt = salt_
        self.max_entry_bytes = max_bytes * ENTRY_FACTOR + ENTRY_SLACK
        self.secret: Optional[bytes] = None
        self.problem = unsafe(self.root)
        if self.problem is None:
            try:
                _private_dir(self.directory)
                self.secret = _secret(self.directory)
            except OSError as exc:
                self.problem = f"cannot use the cache directory {self.root}: {exc.strerror or exc}"

    def key(self, path: str, digest: str, context: str = "") -> str:
        """``context``: what else decides this file's result (its per-file ignores, first-party names)."""
        return hashlib.sha256(f"{self.salt}\0{path}\0{digest}\0{context}".encode(
            "utf-8", "surrogateescape")).hexdigest()

    def _entry(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def _read(self, path: Path) -> Optional[bytes]:
        """The bytes of the entry ``path`` when it is safe to read them (see the module docstring)."""
        try:
            if _foreign(os.lstat(path.parent)) or not stat.S_ISDIR(os.lstat(path.parent).st_mode):
                return None
            fd = os.open(path, _OPEN_ENTRY)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or _foreign(info) or info.st_size > self.max_entry_bytes:
                return None
            with os.fdopen(os.dup(fd), "rb") as handle:
                data = handle.read(self.max_entry_bytes + 1)
            return data if len(data) <= self.max_entry_bytes else None
        except OSError:
            return None
        finally:
            os.close(fd)

    def get(self, key: str, data: bytes) -> Optional[FileResult]:
        """The stored result for ``key`` (whose file holds ``data``), or None if absent or not valid."""
        body = self._body(key)
        return _result(body, data) if body is not None else None

    def put(self, key: str, result: FileResult) -> None:
        """Store ``result`` (best effort: a cache that cannot be written only costs speed)."""
        if self.secret is None or any(f.code in UNCACHED for f in result.findings):
            return
        body = {"path": result.path, "status": result.status, "error": result.error, "migrated": result.migrated,
                "helpers": list(result.helpers), "digest": result.digest,
                "findings": [_finding_json(f) for f in result.findings], "kind": result.kind,
                "requirements": [r.to_json() for r in result.requirements]}
        self._write(key, body)

    def _body(self, key: str) -> Optional[dict]:
        """The signed body stored under ``key``, or None when absent or not valid."""
        if self.secret is None:
            return None
        raw = self._read(self._entry(key))
        if raw is None:
            return None
        try:
            entry = json.loads(raw.decode("utf-8"))
        except ValueError:
            return None
        if not (isinstance(entry, dict) and entry.get("format") == FORMAT and entry.get("version") == VERSION
                and entry.get("key") == key and isinstance(entry.get("result"), dict)
                and isinstance(entry.get("signature"), str)
                and hmac.compare_digest(entry["signature"], _signature(self.secret, entry["result"]))):
            return None
        return entry["result"]

    def record(self, key: str) -> Optional[dict]:
        """A signed record other than a file's result (``put_record``), or None."""
        return self._body(key)

    def put_record(self, key: str, body: dict) -> None:
        if self.secret is not None:
            self._write(key, body)

    def declarations(self) -> Optional[Dict[str, DiagnosticCode]]:
        """The code declarations stored for this very tool (the salt), or None: the reports describe
        every code from them without importing the rules."""
        body = self._body(self._declarations_key)
        codes = body.get("codes") if body is not None else None
        if not isinstance(codes, list):
            return None
        declared = {}
        for item in codes:
            if not (isinstance(item, list) and len(item) == 6 and all(isinstance(v, str) for v in item[:3])
                    and isinstance(item[3], bool) and _optional(item[4], str) and isinstance(item[5], str)):
                return None
            declared[item[0]] = DiagnosticCode(*item)
        return declared

    def put_declarations(self, declared: Dict[str, DiagnosticCode]) -> None:
        if self.secret is not None:
            self._write(self._declarations_key, {"codes": [[d.code, d.name, d.summary, d.rewrites, d.example, d.fixtures]
                                                           for d in declared.values()]})

    @property
    def _declarations_key(self) -> str:
        return hashlib.sha256(f"{self.salt}\0declarations".encode()).hexdigest()

    def _write(self, key: str, body: dict) -> None:
        entry = {"format": FORMAT, "version": VERSION, "key": key, "signature": _signature(self.secret, body),
                 "result": body}
        target = self._entry(key)
        try:
            _private_dir(target.parent)
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
    original = None
    if status == "changed":
        if not isinstance(migrated, str):
            return None
        try:
            original = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    elif migrated is not None:
        return None
    return FileResult(body["path"], status, findings, error=body.get("error"), original=original, migrated=migrated,
                      helpers=helpers, digest=body["digest"], kind=kind,
                      requirements=requirements)
