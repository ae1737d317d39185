"""Running the engine over a tree's Python files, in parallel, without writing anything.

Workers get paths, not contents: each reads its files itself, so only the (small) results travel
back. Each worker process builds the engine once (the op table is handed over once per process at
start-up) and files go out in chunks so the per-file cost of the pool stays small. Results come back
sorted by path, whatever the number of processes.
"""

from __future__ import annotations

import os
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from npu_migrate.migrate import diagnostics
from npu_migrate.migrate.engine import Engine, build_engine, error_result
from npu_migrate.migrate.findings import FileResult, Finding
from npu_migrate.opmap import OpTable

PROGRESS_MIN_FILES = 20  # smaller runs finish before a bar is worth drawing

Task = Tuple[str, bool]  # (path relative to the root, whether its directory is a package)


@dataclass
class RunResult:
    root: Path
    files: List[FileResult]  # one per Python file, sorted by path
    copied: List[str] = field(default_factory=list)  # the other files of the tree, copied unchanged

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


# -- worker side ------------------------------------------------------------------------------------
_engine: Optional[Engine] = None


def _init_worker(table: OpTable, select, ignore) -> None:
    global _engine
    _engine = build_engine(table, select, ignore)


def _migrate_one(engine: Engine, root: Path, path: str, in_package: bool) -> FileResult:
    try:
        data = (root / path).read_bytes()
    except OSError as exc:
        return error_result(path, diagnostics.READ_ERROR, f"cannot be read: {exc.strerror or exc}")
    return engine.migrate(path, data, in_package=in_package)


def _migrate_chunk(root: Path, chunk: Sequence[Task]) -> List[FileResult]:
    return [_migrate_one(_engine, root, path, in_package) for path, in_package in chunk]


# -- main side --------------------------------------------------------------------------------------
def _tasks(python: Sequence[str]) -> List[Task]:
    """Each file with whether its directory holds an ``__init__.py`` (helpers then import relatively)."""
    present = set(python)
    tasks = []
    for path in python:
        parent = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
        tasks.append((path, parent + "__init__.py" in present))
    return tasks


def chunked(items: Sequence, jobs: int) -> List[list]:
    """About 8 chunks per process (balances uneven files), at most 64 files each (keeps the bar moving)."""
    size = max(1, min(64, len(items) // (jobs * 8) or 1))
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


@contextmanager
def _progress(total: int, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A transient Rich bar on stderr (when it is a terminal); yields the function that advances it."""
    from npu_migrate.migrate.console import console

    if not enabled or total <= PROGRESS_MIN_FILES or not console.is_terminal:
        yield lambda n: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("migrating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("files", total=total)
        yield lambda n: bar.advance(task, n)


def run(root: Path, python: Sequence[str], table: OpTable, *, select=None, ignore=None, jobs: Optional[int] = None,
        copied: Sequence[str] = (), progress: bool = False) -> RunResult:
    """Migrate ``python`` (paths relative to ``root``) in memory; ``jobs=1`` stays in this process.

    ``progress`` draws a bar on stderr for runs over ``PROGRESS_MIN_FILES`` files.
    """
    root = Path(root)
    jobs = max(1, jobs or os.cpu_count() or 1)
    tasks = _tasks(python)
    results: List[FileResult] = []
    with _progress(len(tasks), progress) as advance:
        if jobs == 1 or len(tasks) < 2:
            engine = build_engine(table, select, ignore)
            for path, in_package in tasks:
                results.append(_migrate_one(engine, root, path, in_package))
                advance(1)
        else:
            with ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker, initargs=(table, select, ignore)) as pool:
                futures = [pool.submit(_migrate_chunk, root, chunk) for chunk in chunked(tasks, jobs)]
                for future in as_completed(futures):
                    chunk = future.result()
                    results.extend(chunk)
                    advance(len(chunk))
    results.sort(key=lambda r: r.path)
    return RunResult(root, results, sorted(copied))
