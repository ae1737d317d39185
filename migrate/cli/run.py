"""``migrate run PATH``: migrate a tree, write the migrated tree, the patch and the reports.

The engine (libcst) and the outputs are imported when the command runs, not when the CLI starts,
so ``migrate --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import typer
from rich.markup import escape

from .. import catalogue, diagnostics, exitcodes
from . import formats
from .app import app
from .codes import FUSED_PREFIX, check_codes
from .formats import is_human
from .run_options import OutputFormat, RunOptions, UsageError, _exit_code, _load_table, _sarif  # noqa: F401 (OutputFormat: the options' choices, read here)
from .run_paths import ConfigError, Paths, cache_overlap, confine, probe_writable
from .run_writes import _write, _write_reports_and_say, finish_in_place
from ..console import console, out
from ..lifeline import terminate_as_interrupt
from ..limits import DEFAULT_MAX_BYTES, DEFAULT_MAX_SECONDS, Limits

EXIT_CODES = "Exit codes (bits combine, e.g. 20 = 4 + 16): " + "; ".join(
    f"{code} {text}" for code, text in exitcodes.DESCRIPTIONS.items()
    if code not in (exitcodes.PARITY_FAILED, exitcodes.NOT_PROVEN)) + "."

INTERRUPTED = exitcodes.INTERRUPTED


def _parity_json(path: Optional[Path]) -> Optional[dict]:
    from ..outputs import ReportDirError, read_json

    if path is None:
        return None
    try:
        return read_json(path, "parity result")
    except ReportDirError as exc:
        raise ConfigError(str(exc)) from exc


def _split(values: List[str]) -> List[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


@app.command("run", epilog=EXIT_CODES)
def run_command(
    path: Path = typer.Argument(..., metavar="PATH", help="The repository (a directory) to migrate, or one Python file "
                                "or notebook, or - for standard input (with --stdin-filename). Never written unless "
                                "--in-place."),
    out: Optional[Path] = typer.Option(None, "--out", metavar="DIR", help="Write the migrated tree here (default: <PATH>-npu)."),
    in_place: bool = typer.Option(False, "--in-place", help="Rewrite the changed files inside PATH (clean git tree only)."),
    force: bool = typer.Option(False, "--force", help="Allow --in-place outside git or on uncommitted changes; keeps <file>.orig backups."),
    report_dir: Optional[Path] = typer.Option(None, "--report-dir", metavar="DIR", help="Where changes.patch and report.json/.md/.sarif/.html go (default: ./npu-migrate-report, or <PATH>-npu-report when the current directory is inside PATH). Inside PATH it is left out of the migration. With --check, the reports are written only when this is given."),
    opmap: List[Path] = typer.Option([], "--opmap", metavar="FILE", help="Extra op-table YAML file (repeatable); overrides built-in records."),
    select: Optional[str] = typer.Option(None, "--select", metavar="CODES", callback=check_codes, help="Only these codes, comma-separated; prefixes like NPU2 allowed. NPU4xx notes (the vendor's advice) are opt-in: name them (NPU4)."),
    ignore: Optional[str] = typer.Option(None, "--ignore", metavar="CODES", callback=check_codes, help="Skip these codes, comma-separated; prefixes allowed."),
    exclude: List[str] = typer.Option([], "--exclude", metavar="PATTERNS", help="Do not migrate the files these gitignore-style patterns match (comma-separated, repeatable; relative to PATH); they are copied unchanged."),
    no_fused: bool = typer.Option(False, "--no-fused", help="Device rewrites only: no fused-kernel rewrite (same as --ignore NPU3)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", metavar="N", min=1, help="Processes to use (default: all cores)."),
    check: bool = typer.Option(False, "--check", help="Write no migrated tree; list what would change and what needs attention; exit 4/8/16 bits."),
    diff: bool = typer.Option(False, "--diff", help="Write nothing; print the patch to stdout."),
    statistics: bool = typer.Option(False, "--statistics", help="Write nothing; print the number of findings per code (with its summary) to stdout."),
    output_format: OutputFormat = typer.Option(OutputFormat.full, "--output-format", metavar="FORMAT", help="How findings are printed on stdout: full (default), concise, json, json-lines, github, sarif."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print the findings (and errors) only: no summary, no paths."),
    exit_zero: bool = typer.Option(False, "--exit-zero", help="Exit 0 even when --check finds files to change or sites that need attention (4 and 8); errors still count."),
    parity: Optional[Path] = typer.Option(None, "--parity", metavar="FILE", help="A `migrate parity --json` result to show on report.html and report.md."),
    parity_init: bool = typer.Option(False, "--parity-init", help="Also write parity.yaml and parity_harness.py with the reports (as `migrate parity init` does), so `migrate parity --spec <report dir>/parity.yaml` proves the migration."),
    max_file_size: int = typer.Option(DEFAULT_MAX_BYTES, "--max-file-size", metavar="BYTES", min=1, help="Larger Python files are not migrated (NPU007)."),
    file_timeout: float = typer.Option(DEFAULT_MAX_SECONDS, "--file-timeout", metavar="SECONDS", min=0.1, help="CPU seconds one file may take before it is left unmigrated (NPU008)."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", metavar="DIR", help="Where results of unchanged files are cached (default: ~/.cache/npu-migrate or $NPU_MIGRATE_CACHE_DIR)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the result cache."),
    no_triage: bool = typer.Option(False, "--no-triage", help="Parse every file that mentions a rule's trigger with libcst, not only those that CPython's parser finds can hold a site (slower; the same results)."),
    stdin_filename: Optional[str] = typer.Option(None, "--stdin-filename", metavar="NAME", help="With PATH -, the name of the file read from stdin (for its configuration and messages)."),
    isolated: bool = typer.Option(False, "--isolated", help="Ignore [tool.npu-migrate] in pyproject.toml."),
    resume: bool = typer.Option(False, "--resume", help="With --in-place: finish an interrupted in-place run from its journal in the report directory."),
    revert: bool = typer.Option(False, "--revert", help="With --in-place: undo an in-place run (finished or not) from its journal."),
) -> None:
    """Migrate the PyTorch code under PATH to Ascend NPU: a migrated tree, changes.patch and reports.

    Options can also be kept in pyproject.toml's [tool.npu-migrate] table (select, ignore, exclude,
    per-file-ignores, opmap); the command line's --select replaces the file's, --ignore, --exclude
    and --opmap add to it."""
    from ..outputs.in_place import InPlaceRefused
    from ..outputs.journal import JournalError
    from ...opmap import SchemaError

    fmt = output_format.value
    stdin = str(path) == "-"
    try:
        if not is_human(fmt) and (diff or (statistics and fmt != "json")):
            raise UsageError(f"--output-format {fmt} prints findings on stdout, where --diff and --statistics print "
                             "theirs; choose one (--statistics --output-format json prints the statistics as JSON)")
        if stdin and (in_place or out or resume or revert):
            raise UsageError("PATH - (standard input) writes only to stdout: no --out, --in-place, --resume or --revert")
        if resume or revert:
            code = finish_in_place(path, report_dir, in_place, resume, revert)
        else:
            where = Path(stdin_filename) if stdin and stdin_filename else (Path.cwd() if stdin else path)
            config = _config(where, isolated)
            options = RunOptions(
                out, in_place, force, report_dir, [*config.opmap, *opmap],
                select if select is not None else config.select,
                [*config.ignore, *(ignore or []), *([FUSED_PREFIX] if no_fused else [])] or None,
                jobs, check, diff, statistics, _parity_json(parity), Limits(max_file_size, file_timeout),
                None if no_cache else (cache_dir or _default_cache_dir()), fmt, quiet, exit_zero,
                stdin_filename=stdin_filename)
            options.exclude, options.ignored_in = _patterns(config, path, _split(exclude))
            options.parity_init = parity_init
            options.cache_given = cache_dir is not None
            options.triage = not no_triage
            code = _stdin(options) if stdin else run_migration(path, options)
    except UsageError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        code = exitcodes.USAGE_ERROR
    except (ConfigError, InPlaceRefused, SchemaError, JournalError) as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        code = exitcodes.CONFIG_ERROR
    except KeyboardInterrupt:
        console.print("[red]interrupted:[/red] nothing was written (the run stopped before writing)", soft_wrap=True)
        code = INTERRUPTED
    raise typer.Exit(code)


def _config(where: Path, isolated: bool):
    """The ``[tool.npu-migrate]`` table of the nearest pyproject.toml (an empty one when none or --isolated)."""
    from .codes import known_code
    from ..config import Config, ConfigFileError, find, load

    found = None if isolated else find(where)
    if found is None:
        return Config()
    try:
        return load(found, known_code)
    except ConfigFileError as exc:
        raise ConfigError(str(exc)) from exc


def _patterns(config, path: Path, cli_exclude: List[str]):
    """(files not to migrate, the codes per-file-ignores turns off in a file): the configuration's
    patterns are relative to its pyproject.toml, the command line's to PATH."""
    from ..config import Patterns, ignored_in, per_file_codes

    base = Path(path) if str(path) != "-" else Path.cwd()
    base = base if base.is_dir() else base.parent
    exclude = Patterns.of((config.base, config.exclude), (base, cli_exclude))
    rules = per_file_codes(config)
    if not rules:
        return exclude, None

    def per_file(full: Path) -> Tuple[str, ...]:
        try:
            rel = Path(full).resolve().relative_to(config.base).as_posix()
        except ValueError:
            return ()
        return ignored_in(rules, rel)

    return exclude, per_file


def _stdin(options: RunOptions) -> int:
    from .run_stdin import run_stdin

    return run_stdin(options)


def _default_cache_dir() -> Path:
    from ..cache import default_dir

    return default_dir()


def _select_files(files, paths: Paths, exclude) -> None:
    """A single file as PATH: only it; ``--exclude``/``exclude``: copied unchanged, listed as excluded."""
    from ..discovery import Excluded, is_migratable, is_python_script

    if paths.only is not None:
        found = is_migratable(paths.only) or is_python_script(paths.root / paths.only)
        files.python = [paths.only] if found else []
        files.other, files.excluded = [], []
        if not files.python:
            raise ConfigError(f"PATH {paths.root / paths.only} is not a Python file or notebook (.py, .ipynb)")
    if exclude is None or not exclude.groups:
        return
    kept = []
    for rel in files.python:
        pattern = exclude.match(paths.root / rel)
        if pattern is None:
            kept.append(rel)
        else:
            files.other.append(rel)
            files.excluded.append(Excluded(rel, f"excluded by pattern {pattern!r} (--exclude or [tool.npu-migrate] "
                                                "exclude): not migrated, copied unchanged"))
    files.python = kept
    files.other.sort()
    files.excluded.sort(key=lambda e: e.path)


def run_migration(path: Path, options: RunOptions) -> int:
    """The whole ``migrate run``; returns the exit code (``migrate demo`` calls it too).

    A run holds the locks of the directories it writes (``migrate.outputs.lock``) from before its
    checks of the journal to its last report; SIGTERM stops it the way Ctrl-C does."""
    from ..outputs.in_place import check_in_place
    from ..outputs.lock import LockedError, locked

    paths = confine(path, options.out, options.in_place, options.report_dir)
    # the built-in table loads when a file is migrated (not at all when every result is cached);
    # the user's own files are checked now, so that a schema error is always reported
    table = _load_table(options.opmap) if options.opmap else lambda: _load_table(())
    cache = _cache(options, paths)
    backup = False
    if options.in_place and options.writes_tree:
        backup = check_in_place(paths.root, options.force, exclude=[paths.report_dir])
    for directory in filter(None, (paths.out_dir if options.writes_tree else None,
                                   paths.report_dir if options.writes_reports else None)):
        probe_writable(directory)
    held = [(paths.report_dir, "report directory")] if options.writes_reports else []
    if options.writes_tree:
        held.append((paths.root, "PATH") if paths.out_dir is None else (paths.out_dir, "output directory"))
    stored = cache.declarations() if cache is not None else None
    diagnostics.use_stored(stored)  # the reports describe the codes without importing the rules
    try:
        with terminate_as_interrupt(), locked(held):
            code = _migrate(path, paths, table, cache, options, backup)
        if cache is not None and stored is None:
            cache.put_declarations(catalogue.declarations())
        return code
    except LockedError as exc:
        raise ConfigError(str(exc)) from exc
    finally:
        diagnostics.use_stored(None)


def _migrate(path: Path, paths: Paths, table, cache, options: RunOptions, backup: bool) -> int:
    from ..discovery import discover
    from ..outputs.in_place import begin_in_place, unfinished_journal
    from ..outputs.journal import run_identity

    identity = None
    if options.in_place and options.writes_tree:
        problem = unfinished_journal(paths.report_dir)
        if problem:
            raise ConfigError(problem)
        identity = run_identity()
        begin_in_place(paths.report_dir, paths.root, identity)  # from here on the journal is this run's
    files = discover(paths.root, exclude=[paths.report_dir])
    _select_files(files, paths, options.exclude)
    result = _run(paths.root, files, table, options, cache)
    return _finish(path, paths, result, options, backup, identity, cache)


def _run(root: Path, files, table, options: RunOptions, cache):
    from ..runner import run

    ignored_in = None
    if options.ignored_in is not None:
        ignored_in = lambda rel: options.ignored_in(root / rel)  # noqa: E731
    return run(root, files.python, table, select=options.select, ignore=options.ignore, jobs=options.jobs,
               copied=files.other, excluded=files.excluded, unlistable=files.unlistable, too_long=files.too_long,
               progress=True, limits=options.limits, ignored_in=ignored_in, cache=cache, triage=options.triage)


def _finish(path: Path, paths: Paths, result, options: RunOptions, backup: bool, identity: Optional[dict] = None,
            cache=None) -> int:
    """Write what the run writes, print what it prints, and return its exit code."""
    from functools import cache as once, partial

    from . import summary as show
    from ..outputs import report_json
    from ..outputs.changes import collect_changes
    from ..outputs.patch import build_patch

    changes = collect_changes(result)
    patch = once(partial(build_patch, changes))  # made when something shows or writes it (reports left as they were: not)
    fmt = options.output_format
    human = is_human(fmt)
    # stdout is the primary output's: the summary goes there in a human format, unless the patch or
    # the statistics are what stdout carries
    talk = out if human and not (options.diff or options.statistics) else console
    if options.diff:
        typer.echo(patch(), nl=False)
    interrupted = _write(result, changes, paths, backup, identity) if options.writes_tree else False
    report = report_json.build(result, changes)
    if options.statistics:
        typer.echo(show.statistics(report, as_json=fmt == "json"), nl=False)
    elif human:
        if options.check:
            show.check_listing(report, changes, path, fmt, out)
        else:
            show.errors(report, console)
    elif not options.diff:
        typer.echo(formats.machine(fmt, report, paths.root, _sarif(report, result, patch()) if fmt == "sarif" else None),
                   nl=False)
    if not options.quiet:
        show.summary_line(report, talk)
    if options.writes_reports and not _write_reports_and_say(paths, result, patch, report, options, interrupted, talk,
                                                             cache):
        return INTERRUPTED if interrupted else _exit_code(report, result, changes, options) | exitcodes.FILE_ERRORS
    if interrupted:
        return INTERRUPTED
    return _exit_code(report, result, changes, options) | _parity_init(path, paths, options, talk)


def _parity_init(path: Path, paths: Paths, options: RunOptions, talk) -> int:
    """``--parity-init``: the spec beside the reports; its exit bits (32 when none could be written)."""
    if not options.parity_init or not options.writes_tree:
        return exitcodes.OK
    if paths.out_dir is None:
        console.print("[red]error:[/red] --parity-init needs the original beside the migrated tree: not with "
                      "--in-place", soft_wrap=True)
        return exitcodes.CONFIG_ERROR
    from .parity_init import write_and_say

    return write_and_say(paths.root, paths.out_dir, paths.report_dir, talk=talk)


def _cache(options: RunOptions, paths: Paths):
    """The result cache, or None. A cache directory that overlaps PATH, the output or the report
    directory is refused (``--cache-dir``: a configuration error; the default: not used)."""
    if options.cache_dir is None:
        return None
    from ..cache import Cache, salt
    from ...opmap import builtin_files

    problem = cache_overlap(options.cache_dir, paths)
    if problem and options.cache_given:
        raise ConfigError(problem)
    cache = None
    if problem is None:
        select, ignore, limits = options.select, options.ignore, options.limits
        cache = Cache(options.cache_dir, salt([*builtin_files(), *options.opmap], (), select, ignore, limits,
                                              options.triage), limits.max_bytes)
        problem = cache.problem
    if problem:
        console.print(f"[yellow]warning:[/yellow] {escape(problem)} (running without the cache)", soft_wrap=True)
        return None
    return cache
