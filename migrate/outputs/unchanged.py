"""Reports not made again when nothing they are made from has changed (a warm run of an unchanged tree).

The reports are a function of the report dict (``report_json.build``: files, findings, what was
written), the changed files' original and migrated texts (the patch, SARIF's fixes and snippets),
the parity result, PATH (SARIF's source root, git's work tree included), the doc pages SARIF
describes the codes with, and the tool itself, with its options (the result cache's salt). Their
digest (``inputs``) is recorded in the result cache for the report directory, with the digest of
each report as written. A run with the same inputs leaves the reports alone only when each is still
on disk byte for byte as recorded (``on_disk``); anything else (a report edited, deleted or
replaced, a record missing or foreign) makes them all again. Without a cache they are always made.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Mapping, Optional

from .. import diagnostics

if TYPE_CHECKING:
    from ..runner import RunResult


def inputs(run: "RunResult", report: dict, parity: Optional[dict]) -> str:
    """The digest of everything the reports of ``run`` are made from (besides the tool: the cache's salt)."""
    from ..discovery import git_toplevel

    h = hashlib.sha256(json.dumps([report, parity], sort_keys=True, default=str).encode("utf-8", "surrogatepass"))
    root = Path(run.root).resolve()
    h.update(f"\0{root}\0{git_toplevel(root)}\0".encode("utf-8", "surrogateescape"))
    for result in run.changed:
        for text in (result.path, result.original or "", result.migrated or ""):
            h.update(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
    with os.scandir(diagnostics.DOCS_DIR) as pages:  # the code descriptions (not part of the salt)
        for page in sorted(pages, key=lambda e: e.name):
            info = page.stat()
            h.update(f"{page.name}:{info.st_size}:{info.st_mtime_ns}\0".encode())
    return h.hexdigest()


def _key(cache, report_dir: Path) -> str:
    where = os.path.realpath(report_dir)
    return hashlib.sha256(f"{cache.salt}\0reports\0{where}".encode("utf-8", "surrogateescape")).hexdigest()


def _digest(path: Path) -> Optional[str]:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def on_disk(cache, report_dir: Path, digest: str, paths: Mapping[str, Path]) -> bool:
    """Whether the reports recorded for ``report_dir`` were made from ``digest`` and are all on disk as written."""
    body = cache.record(_key(cache, report_dir))
    files = body.get("files") if body is not None else None
    if body is None or body.get("inputs") != digest or not isinstance(files, dict) or set(files) != set(paths):
        return False
    return all(not os.path.islink(paths[name]) and _digest(paths[name]) == files[name] for name in paths)


def remember(cache, report_dir: Path, digest: str, written: Dict[str, bytes]) -> None:
    cache.put_record(_key(cache, report_dir), {"inputs": digest, "files": {name: hashlib.sha256(data).hexdigest()
                                                                           for name, data in written.items()}})
