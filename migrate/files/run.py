"""Migrating a tree's dependency and launcher files, after its Python files (``migrate.runner`` calls
``split`` before and ``migrate_all`` after the Python pass).

``split`` takes the kinds' files out of the files to copy (by name; a file without an extension by
its ``#!`` line; a file that a requirements file includes with ``-r``/``-c`` is a requirements file
whatever its name). ``facts`` reads from the Python results whether the migrated code imports
torch_npu. ``migrate_all`` runs each file in this process under the same guards as a Python file
(the size limit, the CPU-time budget, no exception escapes) and with the result cache (keyed by the
facts too). A ``setup.py`` is a Python file with literal dependency lists: its dependency findings
join its Python result; an edit is made only where the Python rewrites left the file unchanged.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Sequence, Tuple, Union

from .. import diagnostics
from ..diffs import Change, file_diff
from .base import Facts, FileKind
from ..findings import FileResult, Finding, error_result
from ..limits import FileTimeout, Limits, time_budget
from ..sources import SourceError, name_problem, read_source
from ...opmap import Fallback

if TYPE_CHECKING:
    from ...opmap import OpTable

HEAD_BYTES = 128  # enough for a #! line
_IMPORTS_TORCH_NPU = re.compile(rb"^\s*(import\s+torch_npu\b|from\s+torch_npu\b)", re.M)
SETUP_PY = "setup.py"
EnabledIn = Callable[[str], Tuple[Callable[[str], bool], str]]
Table = Union["OpTable", Callable[[], "OpTable"]]  # the op table, or the function that loads it (on a cache miss)


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(HEAD_BYTES)
    except OSError:
        return b""


def split(root: Path, copied: Sequence[str]) -> Tuple[List[Tuple[str, FileKind]], List[str]]:
    """(the files a kind reads, with their kind; the files left to copy unchanged)."""
    if not copied:
        return [], []  # the kinds (and the parsers they import) only for a tree with other files
    from .kinds import kind_of

    declared: Dict[str, FileKind] = {}
    rest = []
    present = set(copied)
    for rel in copied:
        full = root / rel
        if full.is_symlink() or name_problem(rel):
            rest.append(rel)
            continue
        kind = kind_of(rel, _head(full) if "." not in rel.rsplit("/", 1)[-1] else b"")
        if kind is None:
            rest.append(rel)
        else:
            declared[rel] = kind
    _add_includes(root, declared, rest, present)
    return sorted(declared.items()), sorted(rel for rel in rest if rel not in declared)


def _add_includes(root: Path, declared: Dict[str, FileKind], rest: List[str], present: set) -> None:
    """Files included by requirements files (transitively) are requirements files."""
    from .kinds import BY_NAME
    from .requirements_txt import includes

    requirements = BY_NAME["requirements"]
    todo = [rel for rel, kind in declared.items() if kind is requirements]
    while todo:
        rel = todo.pop()
        try:
            text = read_source(root / rel).decode("utf-8", "replace")
        except SourceError:
            continue
        for included in includes(text):
            target = posixpath.normpath(posixpath.join(posixpath.dirname(rel), included))
            if target in present and target not in declared and not (root / target).is_symlink():
                declared[target] = requirements
                todo.append(target)


def facts(root: Path, results: Sequence[FileResult]) -> Facts:
    """Whether the migrated Python code imports torch_npu (a file that already did counts too)."""
    for result in results:
        if result.status == "changed" and result.migrated is not None:
            if _IMPORTS_TORCH_NPU.search(result.migrated.encode("utf-8", "surrogateescape")):
                return Facts(imports_torch_npu=True)
        elif result.status in ("unchanged", "skipped"):
            try:
                data = read_source(root / result.path)
            except SourceError:
                continue
            if b"torch_npu" in data and _IMPORTS_TORCH_NPU.search(data):
                return Facts(imports_torch_npu=True)
    return Facts()


def _one(root: Path, rel: str, kind: FileKind, table: Table, facts_: Facts, enabled_in: EnabledIn,
         limits: Limits, cache) -> FileResult:
    try:
        data = read_source(root / rel, limits.max_bytes)
    except SourceError as exc:
        if exc.code == diagnostics.TOO_LARGE and kind.maybe_data:
            return FileResult(rel, "skipped", kind=kind.name)
        result = error_result(rel, exc.code, exc.message)
        result.kind = kind.name
        return result
    digest = hashlib.sha256(data).hexdigest()
    enabled, ignores = enabled_in(rel)
    key = cache.key(rel, digest, f"{kind.name} {facts_.key()} {ignores}") if cache is not None else None
    if key is not None:
        hit = cache.get(key, data)
        if hit is not None:
            return hit
    from .engine import migrate_file  # only on a cache miss (it imports the engine)

    table = table() if callable(table) else table
    try:
        with time_budget(limits.max_seconds):
            result = migrate_file(rel, data, kind, table, facts_, enabled)
    except FileTimeout:
        result = error_result(rel, diagnostics.TIMED_OUT, f"migration took longer than {limits.max_seconds:g} s "
                                                          "of CPU time (--file-timeout); not migrated")
        result.kind = kind.name
        return result
    result.digest = digest
    if result.status == "changed":
        result.diff = file_diff(Change(result.path, result.original, result.migrated))
    if key is not None:
        cache.put(key, result)
    return result


def _merge_setup_py(python: FileResult, scanned: FileResult) -> FileResult:
    """A setup.py's Python result with its dependency findings; its dependency edits are applied only
    when the Python rewrites left the file as it was (else they are reported, NPU006)."""
    findings: List[Finding] = list(python.findings)
    if scanned.status == "error":
        return python
    changed_by_python = python.status == "changed"
    for finding in scanned.findings:
        if finding.action == "rewritten" and changed_by_python:
            finding = Finding(diagnostics.NOT_APPLIED, f"{finding.code} rewrite not applied: the Python rewrites of "
                                                       f"this file come first ({finding.message})", "reported",
                              api=finding.api, fallback=_manual(finding), path=finding.path, line=finding.line,
                              col=finding.col)
        findings.append(finding)
    findings.sort(key=lambda f: (f.line, f.col, f.code))
    if changed_by_python or scanned.status != "changed":
        python.findings = findings
        python.requirements = scanned.requirements
        if python.status == "skipped" and findings:
            python.status = "unchanged"
        return python
    return FileResult(python.path, "changed", findings, original=scanned.original, migrated=scanned.migrated,
                      digest=scanned.digest, diff=scanned.diff, requirements=scanned.requirements)


def _manual(finding: Finding) -> Fallback:
    return Fallback("manual", f"Make the change by hand: {finding.target or finding.message}.")


def migrate_all(root: Path, declared: Sequence[Tuple[str, FileKind]], results: List[FileResult], table: Table,
                enabled_in: EnabledIn = lambda path: (lambda code: True, ""), limits: Limits = Limits(),
                cache=None) -> Tuple[List[FileResult], List[str]]:
    """The results of the declared files, and the files that turned out to be data (a ``maybe_data``
    kind's file with nothing to read: copied as other files). ``results`` (the Python files') get
    their setup.py findings. ``enabled_in``: a file's path -> (whether a code is on in it, what
    decides that as a cache-key part). ``table``: the op table, or the function that loads it (called
    only for a file the cache does not hold)."""
    setups = [i for i, result in enumerate(results)
              if posixpath.basename(result.path) == SETUP_PY and result.status != "error" and result.kind == "python"]
    if not declared and not setups:
        return [], []
    from .kinds import BY_NAME

    facts_ = facts(root, results)
    out, data = [], []
    for rel, kind in declared:
        result = _one(root, rel, kind, table, facts_, enabled_in, limits, cache)
        if kind.maybe_data and result.status == "skipped":
            data.append(rel)
        else:
            out.append(result)
    setup_kind = BY_NAME.get("setup.py")
    if setup_kind is not None:
        for i in setups:
            scanned = _one(root, results[i].path, setup_kind, table, facts_, enabled_in, limits, cache)
            results[i] = _merge_setup_py(results[i], scanned)
    return out, data

