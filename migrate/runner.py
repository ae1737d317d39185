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
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import diagnostics
from .diffs import Change, file_diff
from .discovery import Excluded
from .files import run as declared_files
from .findings import FileResult, Finding, error_result
from .first_party import first_party_for, first_party_names  # noqa: F401 (first_party_names: read here too)
from .limits import FileTimeout, Limits, time_budget
from .pool import supervise
from .sources import SourceError, display, name_problem, read_source

if TYPE_CHECKING:
    from .engine import Engine
    from ..opmap import OpTable

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
    root: Path
    limits: Limits
    table: Callable[[], OpTable]  # the op table, loaded when a file is first migrated
    first_party: Mapping[str, FrozenSet[str]]
    cache: Optional[object] = None  # migrate.cache.Cache
    ignored_in: Callable[[str], Tuple[str, ...]] = lambda path: ()  # per-file ignores: codes off in a file
    select: Optional[Sequence[str]] = None
    ignore: Optional[Sequence[str]] = None
    triage: bool = True
    engines: Dict[Tuple[str, ...], "Engine"] = field(default_factory=dict)

    def engine_for(self, path: str) -> "Engine":
        """The engine for the file, with its per-file ignores (built, with libcst and the rules, when
        first needed: a run whose results are all cached never imports them)."""
        from .engine import build_engine

        extra = self.ignored_in(path)
        if extra not in self.engines:
            self.engines[extra] = build_engine(self.table(), self.select, [*(self.ignore or ()), *extra] or self.ignore,
                                               self.first_party, self.triage)
        return self.engines[extra]

    def context(self, path: str) -> str:
        """What besides its bytes decides a file's result (for the cache key): its per-file ignores
        and the first-party names its imports sort by."""
        return f"ignore={','.join(self.ignored_in(path))};first-party={','.join(sorted(first_party_for(self.first_party, path)))}"


_job: Optional[_Job] = None  # set in the parent before the workers are forked


def _read(path: Task) -> Union[FileResult, Tuple[bytes, Optional[str]]]:
    """The file's bytes and its cache key, or its error result when it cannot be read."""
    job = _job
    try:
        data = read_source(job.root / path, job.limits.max_bytes)
    except SourceError as exc:
        return error_result(path, exc.code, exc.message)
    if job.cache is None:
        return data, None
    return data, job.cache.key(path, hashlib.sha256(data).hexdigest(), job.context(path))


def _cached(path: Task) -> Optional[FileResult]:
    """The file's result from the cache (or its read error), without migrating it; None when it must be
    migrated."""
    read = _read(path)
    if isinstance(read, FileResult):
        return read
    data, key = read
    return _job.cache.get(key, data) if key is not None else None  # its diff: made from the stored text when
    # the patch is (``outputs.patch``), so the patch and the tree cannot disagree


def _migrate_task(path: Task) -> FileResult:
    job = _job
    read = _read(path)
    if isinstance(read, FileResult):
        return read
    data, key = read
    try:
        with time_budget(job.limits.max_seconds):
            result = job.engine_for(path).migrate(path, data)
    except FileTimeout:
        return error_result(path, diagnostics.TIMED_OUT, f"migration took longer than {job.limits.max_seconds:g} s "
                                                         "of CPU time (--file-timeout); not migrated")
    result.digest = hashlib.sha256(data).hexdigest()
    if result.status == "changed":
        result.diff = _file_diff(result)
    if key is not None:
        job.cache.put(key, result)
    return result


def _largest_first(root: Path, tasks: List[Task]) -> List[Task]:
    """The largest files first: the workers finish together, on small files, instead of one of them
    still parsing a large file that came last while the others wait."""
    def size(task: Task) -> int:
        try:
            return os.lstat(root / task).st_size
        except OSError:
            return 0

    return sorted(tasks, key=size, reverse=True)


def _once(load: Callable[[], "OpTable"]) -> Callable[[], "OpTable"]:
    loaded: List["OpTable"] = []

    def table() -> "OpTable":
        if not loaded:
            loaded.append(load())
        return loaded[0]

    return table


def _worker_setup() -> None:
    gc.set_threshold(*WORKER_GC_THRESHOLD)


def _file_diff(result: FileResult) -> str:
    return file_diff(Change(result.path, result.original, result.migrated))


def _lost(task: Task, why: str) -> FileResult:
    """The result of a file whose worker died or stayed silent past the hard limit."""
    if why.startswith("no answer"):
        return error_result(task, diagnostics.TIMED_OUT, f"migration took longer than {_job.limits.max_seconds:g} s "
                                                         f"(--file-timeout; {why}); not migrated")
    return error_result(task, diagnostics.WORKER_DIED, f"{why}; not migrated")


# -- main side --------------------------------------------------------------------------------------
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
    from .console import console

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
        return (lambda code: _code_enabled(code, select, every)), f"ignore={','.join(extra)}"
    return enabled


def _code_enabled(code: str, select, ignore) -> bool:
    from .rules import code_enabled  # the rules (and libcst) only when a file is migrated

    return code_enabled(code, select, ignore)


def run(root: Path, python: Sequence[str], table: Union["OpTable", Callable[[], "OpTable"]], *, select=None, ignore=None,
        jobs: Optional[int] = None, copied: Sequence[str] = (), excluded: Sequence[Excluded] = (),
        unlistable: Sequence[Excluded] = (), too_long: Sequence[Excluded] = (), progress: bool = False,
        limits: Limits = Limits(), cache=None, isolate: bool = True,
        ignored_in: Optional[Callable[[str], Tuple[str, ...]]] = None, triage: bool = True) -> RunResult:
    """Migrate ``python`` (paths relative to ``root``) in memory, then the dependency and launcher files
    among ``copied`` (the rest is copied unchanged).

    ``table``: the op table, or the function that loads it (called only when a file is migrated).
    With a ``cache``, this process looks each file up first; only the files it does not hold go to
    the workers, and none are started (nor the engine, libcst and the rules imported) when it holds
    them all.

    ``jobs`` worker processes (default: all cores); ``isolate=False`` runs in this process
    instead (for profiling: a crash in native code then ends the process). ``progress`` draws a
    bar on stderr for runs over ``PROGRESS_MIN_FILES`` files. ``cache``: a ``migrate.cache.Cache``.
    ``unlistable``: directories discovery could not read (each becomes an NPU014 error result);
    ``too_long``: paths over PATH_MAX (each an NPU020 error result).
    ``ignored_in``: the codes ``per-file-ignores`` turns off in a file (by its path).
    ``triage=False``: every file with a rule's trigger bytes goes to libcst (``migrate.triage``).
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
    load = _once(table if callable(table) else (lambda given=table: given))
    _job = _Job(root, limits, load, first_party_names(python), cache, ignored_in, select, ignore, triage)
    try:
        with _progress(len(tasks), progress) as advance:
            pending = tasks
            if cache is not None:
                pending = []
                for task in tasks:
                    hit = _cached(task)
                    if hit is None:
                        pending.append(task)
                    else:
                        results.append(hit)
                        advance(1)
            if pending:
                _job.engine_for("")  # built here, so the workers inherit it
            if isolate and pending:
                gc.freeze()  # what the workers inherit is never scanned (nor copied on write by a collection)
                done = supervise(_largest_first(root, pending), _migrate_task, _lost, jobs=jobs, setup=_worker_setup,
                                 hard_seconds=limits.hard_seconds, wall_seconds=limits.wall_seconds)
            else:
                done = ((task, _migrate_task(task)) for task in pending)
            with closing(done):  # an interrupt here stops the workers now, not when the generator is collected
                for _, result in done:
                    results.append(result)
                    advance(1)
    finally:
        _job = None
        gc.unfreeze()
    declared_results, data = declared_files.migrate_all(root, declared, results, load,
                                                        _enabled_in(select, ignore, ignored_in), limits, cache)
    results += declared_results
    copied = [*copied, *data]
    results.sort(key=lambda r: r.path)
    return RunResult(root, results, sorted(copied), list(excluded))
