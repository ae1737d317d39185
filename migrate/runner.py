"""Running the engine over a tree's Python files, in worker processes, without writing anything; then
its dependency and launcher files (``migrate.files.run``), which may depend on what the Python
files became.

Every file runs under one guard: its read (``migrate.sources``: no links, a size limit), the
engine (which turns RecursionError, MemoryError and crashes into the file's error result) and a
time budget (``migrate.limits``). The parser runs in forked workers supervised by
``migrate.pool`` even with ``jobs=1``, so a segfault in native code or a file that never returns
costs that file only: the worker is replaced and the run goes on. Workers get paths, not
contents, read the files themselves and answer file by file; with a result cache
(``migrate.cache``) a worker returns a stored result for bytes it has seen before. Results come
back sorted by path, whatever the number of processes.
"""

from __future__ import annotations

import gc
import hashlib
import os
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple

from npu_migrate.migrate import diagnostics
from npu_migrate.migrate.discovery import Excluded
from npu_migrate.migrate.engine import Engine, build_engine, error_result
from npu_migrate.migrate.files import run as declared_files
from npu_migrate.migrate.findings import FileResult, Finding
from npu_migrate.migrate.limits import FileTimeout, Limits, time_budget
from npu_migrate.migrate.pool import supervise
from npu_migrate.migrate.rules import code_enabled
from npu_migrate.migrate.sources import SourceError, display, name_problem, read_source
from npu_migrate.opmap import OpTable

PROGRESS_MIN_FILES = 20  # smaller runs finish before a bar is worth drawing
# A worker allocates a whole syntax tree per file, almost none of it in reference cycles: collecting
# every 700 allocations (CPython's default) scans the young trees again and again for nothing.
WORKER_GC_THRESHOLD = (50_000, 20, 20)

Task = str  # a path relative to the root


@dataclass
class RunResult:
    root: Path
    files: List[FileResult]  # one per Python, dependency or launcher file (``kind``), sorted by path
    copied: List[str] = field(default_factory=list)  # the other files of the tree, copied unchanged
    excluded: List[Excluded] = field(default_factory=list)  # what discovery left out, with the reason
    written: Optional["WriteOutcome"] = None  # what the run wrote (None: nothing was to be written)

    @property
    def findings(self) -> List[Finding]:
        return [f for result in self.files for f in result.findings]

    def count(self, status: str) -> int:
        return sum(1 for r in self.files if r.status == status)

    @property
    def errors(self) -> List[FileResult]:
        return [r for r in self.files if r.status == "error"]

    @property
    def changed(self) -> List[FileResult]:
        return [r for r in self.files if r.status == "changed"]

    @property
    def rewritten(self) -> List[Finding]:
        return [f for f in self.findings if f.action == "rewritten"]

    @property
    def reported(self) -> List[Finding]:
        """Sites a rule could not migrate (tool errors on whole files are not sites)."""
        return [f for f in self.findings if f.action == "reported" and f.code not in diagnostics.FILE_ERRORS]

    def by_code(self) -> Dict[str, int]:
        return dict(sorted(Counter(f.code for f in self.findings).items()))


@dataclass
class WriteOutcome:
    """Where a run wrote and how far it got: the report says which files were and were not written."""

    target: str  # the output directory, or PATH for --in-place
    written: List[str] = field(default_factory=list)
    failed: Dict[str, str] = field(default_factory=dict)  # path -> why it was not written
    complete: bool = False  # False when the writing stopped early (interrupted, a fatal error)
    journal: Optional[str] = None  # --in-place: the journal that can finish or revert the run
    backups: List[str] = field(default_factory=list)  # --in-place --force: the <file>.orig copies made


# -- one file ---------------------------------------------------------------------------------------
@dataclass
class _Job:
    engine: Engine
    root: Path
    limits: Limits
    cache: Optional[object] = None  # migrate.cache.Cache
    ignored_in: Callable[[str], Tuple[str, ...]] = lambda path: ()  # per-file ignores: codes off in a file
    table: Optional[OpTable] = None
    select: Optional[Sequence[str]] = None
    ignore: Optional[Sequence[str]] = None
    engines: Dict[Tuple[str, ...], Engine] = field(default_factory=dict)

    def engine_for(self, path: str) -> Tuple[Engine, str]:
        """The engine for the file (with its per-file ignores) and what besides its bytes decides its
        result (for the cache key): those ignores and the first-party names its imports sort by."""
        extra = self.ignored_in(path)
        engine = self.engine
        if extra:
            if extra not in self.engines:
                self.engines[extra] = build_engine(self.table, self.select, [*(self.ignore or ()), *extra],
                                                   self.engine.first_party)
            engine = self.engines[extra]
        context = f"ignore={','.join(extra)};first-party={','.join(sorted(self.engine.first_party_of(path)))}"
        return engine, context


_job: Optional[_Job] = None  # set in the parent before the workers are forked


def _migrate_task(path: Task) -> FileResult:
    job = _job
    try:
        data = read_source(job.root / path, job.limits.max_bytes)
    except SourceError as exc:
        return error_result(path, exc.code, exc.message)
    digest = hashlib.sha256(data).hexdigest()
    engine, context = job.engine_for(path)
    key = job.cache.key(path, digest, context) if job.cache is not None else None
    if key is not None:
        hit = job.cache.get(key, data)
        if hit is not None:
            if hit.status == "changed":
                hit.diff = _file_diff(hit)  # from the stored text: the patch and the tree cannot disagree
            return hit
    try:
        with time_budget(job.limits.max_seconds):
            result = engine.migrate(path, data)
    except FileTimeout:
        return error_result(path, diagnostics.TIMED_OUT, f"migration took longer than {job.limits.max_seconds:g} s "
                                                         "of CPU time (--file-timeout); not migrated")
    result.digest = digest
    if result.status == "changed":
        result.diff = _file_diff(result)
    if key is not None:
        job.cache.put(key, result)
    return result


def _worker_setup() -> None:
    gc.set_threshold(*WORKER_GC_THRESHOLD)


def _file_diff(result: FileResult) -> str:
    from npu_migrate.migrate.outputs.changes import Change  # the outputs import this module
    from npu_migrate.migrate.outputs.patch import file_diff

    return file_diff(Change(result.path, result.original, result.migrated))


def _lost(task: Task, why: str) -> FileResult:
    """The result of a file whose worker died or stayed silent past the hard limit."""
    if why.startswith("no answer"):
        return error_result(task, diagnostics.TIMED_OUT, f"migration took longer than {_job.limits.max_seconds:g} s "
                                                         f"(--file-timeout; {why}); not migrated")
    return error_result(task, diagnostics.WORKER_DIED, f"{why}; not migrated")


# -- main side --------------------------------------------------------------------------------------
def first_party_names(python: Sequence[str]) -> Dict[str, FrozenSet[str]]:
    """isort's first-party module names, by directory ("" for PATH): the modules and packages at the
    top of PATH (and of its ``src/``), and for each directory the modules beside its files (a script
    imports its siblings by name)."""
    names: Dict[str, set] = {}
    for path in python:
        parts = path.split("/")
        for depth in range(len(parts)):
            directory = "/".join(parts[:depth])
            name = parts[depth]
            if depth == len(parts) - 1:
                if not name.endswith(".py"):
                    break
                name = name[:-3]
            if name.isidentifier():
                names.setdefault(directory, set()).add(name)
    top = set(names.get("", ())) | set(names.get("src", ()))
    out = {directory: frozenset(found) for directory, found in names.items()}
    out[""] = frozenset(top)
    return out


def chunked(items: Sequence, jobs: int) -> List[list]:
    """About 8 chunks per process (balances uneven files), at most 64 files each."""
    size = max(1, min(64, len(items) // (jobs * 8) or 1))
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


@contextmanager
def _progress(total: int, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A transient Rich bar on stderr (when it is a terminal); yields the function that advances it."""
    if not enabled or total <= PROGRESS_MIN_FILES:
        yield lambda n: None
        return
    from npu_migrate.migrate.console import console

    if not console.is_terminal:
        yield lambda n: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("migrating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("files", total=total)
        yield lambda n: bar.advance(task, n)


def _enabled_in(select, ignore, ignored_in: Callable[[str], Tuple[str, ...]]):
    """path -> (whether a code is on in that file, the file's ignores as a cache-key part)."""
    def enabled(path: str) -> Tuple[Callable[[str], bool], str]:
        extra = ignored_in(path)
        every = [*(ignore or ()), *extra]
        return (lambda code: code_enabled(code, select, every)), f"ignore={','.join(extra)}"
    return enabled


def run(root: Path, python: Sequence[str], table: OpTable, *, select=None, ignore=None, jobs: Optional[int] = None,
        copied: Sequence[str] = (), excluded: Sequence[Excluded] = (), unlistable: Sequence[Excluded] = (),
        too_long: Sequence[Excluded] = (), progress: bool = False, limits: Limits = Limits(), cache=None,
        isolate: bool = True, ignored_in: Optional[Callable[[str], Tuple[str, ...]]] = None) -> RunResult:
    """Migrate ``python`` (paths relative to ``root``) in memory, then the dependency and launcher files
    among ``copied`` (the rest is copied unchanged).

    ``jobs`` worker processes (default: all cores); ``isolate=False`` runs in this process
    instead (for profiling: a crash in native code then ends the process). ``progress`` draws a
    bar on stderr for runs over ``PROGRESS_MIN_FILES`` files. ``cache``: a ``migrate.cache.Cache``.
    ``unlistable``: directories discovery could not read (each becomes an NPU014 error result);
    ``too_long``: paths over PATH_MAX (each an NPU020 error result).
    ``ignored_in``: the codes ``per-file-ignores`` turns off in a file (by its path).
    """
    global _job
    root = Path(root)
    jobs = max(1, jobs or os.cpu_count() or 1)
    results = [error_result(d.path, diagnostics.UNLISTABLE, d.reason) for d in unlistable]
    results += [error_result(display(d.path), diagnostics.PATH_TOO_LONG, d.reason) for d in too_long]
    declared, copied = declared_files.split(root, copied)
    tasks = []
    for path in python:
        problem = name_problem(path)
        if problem:  # reported under a printable name, copied under its own
            results.append(error_result(display(path), diagnostics.BAD_NAME, problem))
            copied.append(path)
        else:
            tasks.append(path)
    ignored_in = ignored_in or (lambda path: ())
    _job = _Job(build_engine(table, select, ignore, first_party_names(python)), root, limits, cache,
                ignored_in, table, select, ignore)
    try:
        with _progress(len(tasks), progress) as advance:
            if isolate:
                gc.freeze()  # what the workers inherit is never scanned (nor copied on write by a collection)
                done = supervise(tasks, _migrate_task, _lost, jobs=jobs, setup=_worker_setup,
                                 hard_seconds=limits.hard_seconds, wall_seconds=limits.wall_seconds)
            else:
                done = ((task, _migrate_task(task)) for task in tasks)
            for _, result in done:
                results.append(result)
                advance(1)
    finally:
        _job = None
        gc.unfreeze()
    declared_results, data = declared_files.migrate_all(root, declared, results, table,
                                                        _enabled_in(select, ignore, ignored_in), limits, cache)
    results += declared_results
    copied = [*copied, *data]
    results.sort(key=lambda r: r.path)
    return RunResult(root, results, sorted(copied), list(excluded))
