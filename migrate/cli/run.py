"""``migrate run PATH``: migrate a tree, write the migrated tree, the patch and the reports.

The engine (libcst) and the outputs are imported when the command runs, not when the CLI starts,
so ``migrate --help`` stays fast.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.cli.app import app
from npu_migrate.migrate.cli.codes import FUSED_PREFIX, check_codes
from npu_migrate.migrate.cli.run_paths import ConfigError, Paths, cache_overlap, confine, probe_writable
from npu_migrate.migrate.console import console
from npu_migrate.migrate.lifeline import terminate_as_interrupt
from npu_migrate.migrate.limits import DEFAULT_MAX_BYTES, DEFAULT_MAX_SECONDS, Limits

EXIT_CODES = "Exit codes (bits combine, e.g. 20 = 4 + 16): " + "; ".join(
    f"{code} {text}" for code, text in exitcodes.DESCRIPTIONS.items() if code != exitcodes.PARITY_FAILED) + "."

INTERRUPTED = exitcodes.INTERRUPTED


def _parity_json(path: Optional[Path]) -> Optional[dict]:
    from npu_migrate.migrate.outputs import ReportDirError, read_json

    if path is None:
        return None
    try:
        return read_json(path, "parity result")
    except ReportDirError as exc:
        raise ConfigError(str(exc)) from exc


@app.command("run", epilog=EXIT_CODES)
def run_command(
    path: Path = typer.Argument(..., help="The repository (directory) to migrate. Never written unless --in-place."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the migrated tree here (default: <PATH>-npu)."),
    in_place: bool = typer.Option(False, "--in-place", help="Rewrite the changed files inside PATH (clean git tree only)."),
    force: bool = typer.Option(False, "--force", help="Allow --in-place outside git or on uncommitted changes; keeps <file>.orig backups."),
    report_dir: Optional[Path] = typer.Option(None, "--report-dir", help="Where changes.patch and report.json/.md/.sarif/.html go (default: ./npu-migrate-report, or <PATH>-npu-report when the current directory is inside PATH); never inside PATH."),
    opmap: List[Path] = typer.Option([], "--opmap", help="Extra op-table YAML file (repeatable); overrides built-in records."),
    select: Optional[str] = typer.Option(None, "--select", callback=check_codes, help="Only these codes, comma-separated; prefixes like NPU2 allowed."),
    ignore: Optional[str] = typer.Option(None, "--ignore", callback=check_codes, help="Skip these codes, comma-separated; prefixes allowed."),
    no_fused: bool = typer.Option(False, "--no-fused", help="Device rewrites only: no fused-kernel rewrite (same as --ignore NPU3)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="Processes to use (default: all cores)."),
    check: bool = typer.Option(False, "--check", help="Write nothing; list what would change and what needs attention; exit 4/8/16 bits."),
    diff: bool = typer.Option(False, "--diff", help="Write nothing; print the patch to stdout."),
    statistics: bool = typer.Option(False, "--statistics", help="Print the number of findings per code (with its summary) to stdout."),
    parity: Optional[Path] = typer.Option(None, "--parity", help="A `migrate parity --json` result to show on report.html."),
    max_file_size: int = typer.Option(DEFAULT_MAX_BYTES, "--max-file-size", min=1, help="Larger Python files are not migrated (NPU007), in bytes."),
    file_timeout: float = typer.Option(DEFAULT_MAX_SECONDS, "--file-timeout", min=0.1, help="CPU seconds one file may take before it is left unmigrated (NPU008)."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Where results of unchanged files are cached (default: ~/.cache/npu-migrate or $NPU_MIGRATE_CACHE_DIR)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the result cache."),
    resume: bool = typer.Option(False, "--resume", help="With --in-place: finish an interrupted in-place run from its journal in the report directory."),
    revert: bool = typer.Option(False, "--revert", help="With --in-place: undo an in-place run (finished or not) from its journal."),
) -> None:
    """Migrate the PyTorch code under PATH to Ascend NPU: a migrated tree, changes.patch and reports."""
    from npu_migrate.migrate.outputs.in_place import InPlaceRefused
    from npu_migrate.migrate.outputs.journal import JournalError
    from npu_migrate.opmap import SchemaError

    ignore_codes = (ignore or []) + ([FUSED_PREFIX] if no_fused else [])
    try:
        if resume or revert:
            code = finish_in_place(path, report_dir, in_place, resume, revert)
        else:
            code = run_migration(path, out, in_place, force, report_dir, opmap, select, ignore_codes or None, jobs,
                                 check, diff, statistics=statistics, parity=_parity_json(parity),
                                 limits=Limits(max_file_size, file_timeout),
                                 cache_dir=None if no_cache else (cache_dir or _default_cache_dir()),
                                 cache_given=cache_dir is not None)
    except (ConfigError, InPlaceRefused, SchemaError, JournalError) as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        code = exitcodes.CONFIG_ERROR
    except KeyboardInterrupt:
        console.print("[red]interrupted:[/red] nothing was written (the run stopped before writing)", soft_wrap=True)
        code = INTERRUPTED
    raise typer.Exit(code)


def _default_cache_dir() -> Path:
    from npu_migrate.migrate.cache import default_dir

    return default_dir()


def run_migration(path, out, in_place, force, report_dir, opmap, select, ignore, jobs, check, diff, *,
                  statistics: bool = False, parity: Optional[dict] = None, limits: Limits = Limits(),
                  cache_dir: Optional[Path] = None, cache_given: bool = False) -> int:
    """The whole ``migrate run``; returns the exit code (``migrate demo`` calls it too).

    A run that writes holds the locks of the directories it writes (``migrate.outputs.lock``) from
    before its checks to its last report; SIGTERM stops it the way Ctrl-C does."""
    from npu_migrate.migrate.outputs.in_place import check_in_place
    from npu_migrate.migrate.outputs.lock import LockedError, locked
    from npu_migrate.opmap import load_table

    writes = not (check or diff)
    paths = confine(path, out, in_place, report_dir)
    try:
        table = load_table(opmap)
    except OSError as exc:
        raise ConfigError(f"cannot read op table {exc.filename}: {exc.strerror}") from exc
    cache = _cache(cache_dir, cache_given, paths, opmap, select, ignore, limits)
    backup = check_in_place(paths.root, force, exclude=[paths.report_dir]) if in_place and writes else False
    if writes:
        for directory in filter(None, (paths.out_dir, paths.report_dir)):
            probe_writable(directory)
    held = [(paths.report_dir, "report directory")]
    held.append((paths.root, "PATH") if paths.out_dir is None else (paths.out_dir, "output directory"))
    try:
        with terminate_as_interrupt(), (locked(held) if writes else nullcontext()):
            return _migrate(path, paths, table, cache, limits, backup, select, ignore, jobs, check, diff,
                            statistics=statistics, parity=parity)
    except LockedError as exc:
        raise ConfigError(str(exc)) from exc


def _migrate(path, paths: Paths, table, cache, limits: Limits, backup: bool, select, ignore, jobs, check, diff, *,
             statistics: bool, parity: Optional[dict]) -> int:
    from npu_migrate.migrate.cli import summary as show
    from npu_migrate.migrate.discovery import discover
    from npu_migrate.migrate.outputs import report_json
    from npu_migrate.migrate.outputs.changes import collect_changes
    from npu_migrate.migrate.outputs.in_place import begin_in_place, unfinished_journal
    from npu_migrate.migrate.outputs.journal import run_identity
    from npu_migrate.migrate.outputs.patch import build_patch
    from npu_migrate.migrate.runner import run

    writes = not (check or diff)
    root = paths.root
    identity = None
    if paths.out_dir is None and writes:
        problem = unfinished_journal(paths.report_dir)
        if problem:
            raise ConfigError(problem)
        identity = run_identity()
        begin_in_place(paths.report_dir, root, identity)  # from here on the journal is this run's

    files = discover(root, exclude=[paths.report_dir])
    result = run(root, files.python, table, select=select, ignore=ignore, jobs=jobs, copied=files.other,
                 excluded=files.excluded, unlistable=files.unlistable, too_long=files.too_long, progress=True,
                 limits=limits, cache=cache)
    changes = collect_changes(result)
    patch = build_patch(changes)

    if diff:
        typer.echo(patch, nl=False)
    interrupted = _write(result, changes, paths, backup, identity) if writes else False
    report = report_json.build(result)
    if statistics:
        typer.echo(show.statistics(report), nl=False)
    show.summary_line(report)
    show.errors(report)
    if check:
        show.check_listing(report, changes, path)
    if writes and not _write_reports_and_say(paths, result, patch, report, parity, interrupted):
        return INTERRUPTED if interrupted else _exit_code(report, result, changes, check) | exitcodes.FILE_ERRORS
    return INTERRUPTED if interrupted else _exit_code(report, result, changes, check)


def _cache(cache_dir: Optional[Path], given: bool, paths: Paths, opmap, select, ignore, limits: Limits):
    """The result cache, or None. A cache directory that overlaps PATH, the output or the report
    directory is refused (``--cache-dir``: a configuration error; the default: not used)."""
    if cache_dir is None:
        return None
    from npu_migrate.migrate.cache import Cache, salt
    from npu_migrate.migrate.rules import select_rules
    from npu_migrate.opmap.table import builtin_files

    problem = cache_overlap(cache_dir, paths)
    if problem and given:
        raise ConfigError(problem)
    cache = None
    if problem is None:
        cache = Cache(cache_dir, salt([*builtin_files(), *opmap], select_rules(select, ignore), select, ignore, limits),
                      limits.max_bytes)
        problem = cache.problem
    if problem:
        console.print(f"[yellow]warning:[/yellow] {escape(problem)} (running without the cache)", soft_wrap=True)
        return None
    return cache


def _write(result, changes, paths: Paths, backup: bool, identity: Optional[dict]) -> bool:
    """Write the tree (or the in-place changes); returns whether Ctrl-C stopped the writing.

    The outcome lands in ``result.written`` either way, so the reports say what was written."""
    from npu_migrate.migrate.outputs.in_place import write_in_place
    from npu_migrate.migrate.outputs.journal import journal_dir
    from npu_migrate.migrate.outputs.tree import STAGING_DIR, mark_unwritten, python_paths, write_tree
    from npu_migrate.migrate.runner import WriteOutcome

    if paths.out_dir is None:
        result.written = WriteOutcome(str(paths.root), journal=str(journal_dir(paths.report_dir)))
        intended = [c.path for c in changes]
    else:
        result.written = WriteOutcome(str(paths.out_dir))
        intended = sorted({*result.copied, *python_paths(result), *(c.path for c in changes)})
    try:
        if paths.out_dir is None:
            write_in_place(paths.root, changes, backup, journal_dir(paths.report_dir), result.written, identity)
        else:
            write_tree(result, changes, paths.out_dir, result.written, staging=paths.report_dir / STAGING_DIR)
    except KeyboardInterrupt:
        outcome = result.written
        outcome.complete = False
        for rel in intended:
            if rel not in outcome.written and rel not in outcome.failed:
                outcome.failed[rel] = "not written: the run was interrupted"
        mark_unwritten(result, outcome)
        return True
    return False


def _write_reports_and_say(paths: Paths, result, patch: str, report: dict, parity, interrupted: bool) -> bool:
    """Write the reports and say where everything went; returns whether the reports were written."""
    from npu_migrate.migrate.outputs import PATCH_NAME, write_reports
    from npu_migrate.migrate.outputs.patch import apply_command

    outcome = result.written
    try:
        reports = write_reports(paths.report_dir, result, patch, report=report, parity=parity)
    except OSError as exc:
        console.print(f"[red]error:[/red] the reports could not be written: {escape(str(exc.filename or paths.report_dir))}: "
                      f"{escape(exc.strerror or str(exc))}", soft_wrap=True)
        reports = None
    if paths.out_dir is None:
        where = f"in place in {paths.root}" + (f" ({len(outcome.backups)} backups <file>.orig)" if outcome.backups else "")
    else:
        where = str(paths.out_dir)
    state = "" if outcome.complete and not outcome.failed else \
        f" ({len(outcome.written)} files written, {len(outcome.failed)} not written{', interrupted' if interrupted else ''})"
    console.print(f"Migrated tree: {escape(where)}{state}", soft_wrap=True)
    if not outcome.complete and outcome.journal:
        console.print(f"In-place journal: {escape(outcome.journal)} (finish with --resume, undo with --revert)",
                      soft_wrap=True)
    if reports is not None:
        console.print(f"Patch:   {reports[PATCH_NAME]}  (apply: {apply_command(paths.root, reports[PATCH_NAME])})",
                      soft_wrap=True)
        console.print("Reports: " + ", ".join(str(reports[name]) for name in reports if name != PATCH_NAME),
                      soft_wrap=True)
    return reports is not None


def finish_in_place(path: Path, report_dir: Optional[Path], in_place: bool, resume: bool, revert: bool) -> int:
    """``--resume`` / ``--revert``: finish or undo an in-place run from its journal."""
    from npu_migrate.migrate.outputs.in_place import finish_journal

    from npu_migrate.migrate.outputs.lock import LockedError, locked

    if not in_place or (resume and revert):
        raise ConfigError("--resume and --revert go with --in-place, one at a time")
    paths = confine(path, None, True, report_dir)
    try:
        with terminate_as_interrupt(), locked([(paths.root, "PATH"), (paths.report_dir, "report directory")]):
            outcome = finish_journal(paths.report_dir, paths.root, forward=resume)
    except LockedError as exc:
        raise ConfigError(str(exc)) from exc
    verb = "finished" if resume else "reverted"
    console.print(f"In-place run {verb}: {len(outcome.written)} files written, {len(outcome.failed)} not written",
                  soft_wrap=True)
    for rel, why in sorted(outcome.failed.items()):
        console.print(f"[red]not written:[/red] {escape(rel)}: {escape(why)}", soft_wrap=True)
    return exitcodes.FILE_ERRORS if outcome.failed else exitcodes.OK


def _exit_code(report: dict, result, changes, check: bool) -> int:
    s = report["summary"]
    code = exitcodes.FILE_ERRORS if s["files_errored"] else exitcodes.OK
    if result.written is not None and result.written.failed:
        code |= exitcodes.FILE_ERRORS
    if check:
        code |= exitcodes.WOULD_CHANGE if changes else 0
        code |= exitcodes.UNSUPPORTED if s["sites_reported"] else 0
    return code
