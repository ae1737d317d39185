"""``migrate run PATH``: migrate a tree, write the migrated tree, the patch and the reports.

The engine (libcst) and the outputs are imported when the command runs, not when the CLI starts,
so ``migrate --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.cli.app import app
from npu_migrate.migrate.cli.codes import FUSED_PREFIX, check_codes
from npu_migrate.migrate.console import console

EXIT_CODES = "Exit codes (bits combine, e.g. 20 = 4 + 16): " + "; ".join(
    f"{code} {text}" for code, text in exitcodes.DESCRIPTIONS.items() if code != exitcodes.PARITY_FAILED) + "."


class ConfigError(Exception):
    pass


def _inside(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def _out_dir(root: Path, out: Optional[Path], in_place: bool) -> Optional[Path]:
    """Where the migrated tree goes (None for --in-place), refusing places that would overlap PATH."""
    from npu_migrate.migrate.outputs.tree import default_out_dir

    if in_place:
        if out is not None:
            raise ConfigError("--out and --in-place cannot be used together")
        return None
    target = out.resolve() if out is not None else default_out_dir(root)
    if target.exists() and not target.is_dir():
        raise ConfigError(f"the output directory {target} exists and is not a directory")
    if _inside(target, root) or _inside(root, target):
        raise ConfigError(f"the output directory {target} overlaps PATH {root}; choose a directory outside it")
    return target


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
    report_dir: Path = typer.Option(Path("npu-migrate-report"), "--report-dir", help="Where changes.patch and report.json/.md/.sarif/.html go."),
    opmap: List[Path] = typer.Option([], "--opmap", help="Extra op-table YAML file (repeatable); overrides built-in records."),
    select: Optional[str] = typer.Option(None, "--select", callback=check_codes, help="Only these codes, comma-separated; prefixes like NPU2 allowed."),
    ignore: Optional[str] = typer.Option(None, "--ignore", callback=check_codes, help="Skip these codes, comma-separated; prefixes allowed."),
    no_fused: bool = typer.Option(False, "--no-fused", help="Device rewrites only: no fused-kernel rewrite (same as --ignore NPU3)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="Processes to use (default: all cores; 1 = no pool)."),
    check: bool = typer.Option(False, "--check", help="Write nothing; list what would change and what needs attention; exit 4/8/16 bits."),
    diff: bool = typer.Option(False, "--diff", help="Write nothing; print the patch to stdout."),
    statistics: bool = typer.Option(False, "--statistics", help="Print the number of findings per code (with its summary) to stdout."),
    parity: Optional[Path] = typer.Option(None, "--parity", help="A `migrate parity --json` result to show on report.html."),
) -> None:
    """Migrate the PyTorch code under PATH to Ascend NPU: a migrated tree, changes.patch and reports."""
    from npu_migrate.migrate.outputs.in_place import InPlaceRefused
    from npu_migrate.opmap import SchemaError

    ignore_codes = (ignore or []) + ([FUSED_PREFIX] if no_fused else [])
    try:
        code = run_migration(path, out, in_place, force, report_dir, opmap, select, ignore_codes or None, jobs, check,
                             diff, statistics=statistics, parity=_parity_json(parity))
    except (ConfigError, InPlaceRefused, SchemaError) as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        code = exitcodes.CONFIG_ERROR
    raise typer.Exit(code)


def run_migration(path, out, in_place, force, report_dir, opmap, select, ignore, jobs, check, diff, *,
                  statistics: bool = False, parity: Optional[dict] = None) -> int:
    """The whole ``migrate run``; returns the exit code (``migrate demo`` calls it too)."""
    from npu_migrate.migrate.cli import summary as show
    from npu_migrate.migrate.discovery import discover
    from npu_migrate.migrate.outputs import PATCH_NAME, write_reports
    from npu_migrate.migrate.outputs import report_json
    from npu_migrate.migrate.outputs.changes import collect_changes
    from npu_migrate.migrate.outputs.in_place import check_in_place, write_in_place
    from npu_migrate.migrate.outputs.patch import apply_command, build_patch
    from npu_migrate.migrate.outputs.tree import write_tree
    from npu_migrate.migrate.runner import run
    from npu_migrate.opmap import load_table

    if not path.is_dir():
        raise ConfigError(f"PATH {path} is not a directory")
    root = path.resolve()
    writes = not (check or diff)
    out_dir = _out_dir(root, out, in_place)
    try:
        table = load_table(opmap)
    except OSError as exc:
        raise ConfigError(f"cannot read op table {exc.filename}: {exc.strerror}") from exc
    report_dir = report_dir.resolve()
    backup = check_in_place(root, force, exclude=[report_dir]) if in_place and writes else False

    files = discover(root, exclude=[report_dir])
    result = run(root, files.python, table, select=select, ignore=ignore, jobs=jobs, copied=files.other, progress=True)
    changes = collect_changes(result)
    patch = build_patch(changes)
    report = report_json.build(result)

    if diff:
        typer.echo(patch, nl=False)
    if statistics:
        typer.echo(show.statistics(report), nl=False)
    show.summary_line(report)
    show.errors(report)
    if check:
        show.check_listing(report, changes, path)
    if writes:
        if out_dir is None:
            backups = write_in_place(root, changes, backup)
            where = f"in place in {root}" + (f" ({len(backups)} backups <file>.orig)" if backups else "")
        else:
            write_tree(result, changes, out_dir)
            where = str(out_dir)
        reports = write_reports(report_dir, result, patch, report=report, parity=parity)
        console.print(f"Migrated tree: {where}", soft_wrap=True)
        console.print(f"Patch:   {reports[PATCH_NAME]}  (apply: {apply_command(root, reports[PATCH_NAME])})", soft_wrap=True)
        console.print("Reports: " + ", ".join(str(reports[name]) for name in reports if name != PATCH_NAME), soft_wrap=True)
    return _exit_code(report, changes, check)


def _exit_code(report: dict, changes, check: bool) -> int:
    s = report["summary"]
    code = exitcodes.FILE_ERRORS if s["files_errored"] else exitcodes.OK
    if check:
        code |= exitcodes.WOULD_CHANGE if changes else 0
        code |= exitcodes.UNSUPPORTED if s["sites_reported"] else 0
    return code
