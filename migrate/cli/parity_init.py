"""``migrate parity init [PATH]``: write a parity spec and its harness beside a migration's reports."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from .. import exitcodes
from .parity import parity_app
from ..console import console, out


@parity_app.command("init")
def parity_init(
    path: Path = typer.Argument(Path("."), metavar="[PATH]", help="The original tree `migrate run` was given (default: the current directory)."),
    migrated: Optional[Path] = typer.Option(None, "--migrated", metavar="DIR", help="The migrated tree (default: <PATH>-npu, as `migrate run` writes it)."),
    report_dir: Optional[Path] = typer.Option(None, "--report-dir", metavar="DIR", help="Where the migration's report.json is; the spec and harness are written there (default: as `migrate run` chooses)."),
    force: bool = typer.Option(False, "--force", help="Replace a parity.yaml or parity_harness.py that `migrate parity init` did not write."),
) -> None:
    """Write parity.yaml and parity_harness.py beside the reports: a case per model class whose forward
    reaches a rewritten site, with tiny sizes and inputs inferred from the code (float32, bfloat16,
    AMP bfloat16, training, KV-cache decode, a left-padded batch). What cannot be inferred is a TODO in the spec, which
    `migrate parity` refuses with its message (listed here too). Exit code: 0 when written, 32 when
    nothing could be written (no report.json, paths that overlap, no model reaching a rewritten site)."""
    raise typer.Exit(write_and_say(path, migrated, report_dir, force))


def write_and_say(path: Path, migrated: Optional[Path], report_dir: Optional[Path], force: bool = False,
                  talk=out) -> int:
    """Write the spec (``migrate run --parity-init`` calls this too); returns the exit code."""
    from .run_paths import ConfigError, confine
    from ..parity.init import InitError, init_parity

    try:
        paths = confine(path, migrated, False, report_dir)
        result = init_parity(paths.root, paths.out_dir, paths.report_dir, force)
    except (ConfigError, InitError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        return exitcodes.CONFIG_ERROR
    if result.spec is None:
        console.print(f"[yellow]no spec written:[/] no model class's forward reaches one of the "
                      f"{len(result.sites)} rewritten numerics-changing site(s)", soft_wrap=True)
        return exitcodes.CONFIG_ERROR
    talk.print(f"Parity spec: {result.spec} ({len(result.drafts)} case(s) for {len(result.models)} model(s), "
               f"{len(result.sites) - len(result.unreached)}/{len(result.sites)} rewritten site(s) reached)",
               soft_wrap=True, markup=False)
    talk.print(f"Harness:     {result.harness}", soft_wrap=True, markup=False)
    for site in result.unreached:
        talk.print(f"not reached by any model's forward: {site}", soft_wrap=True, markup=False)
    for item in result.todos:
        console.print(f"[yellow]TODO[/] {escape(item[len('TODO: '):])}", soft_wrap=True)
    talk.print(f"Run: migrate parity --spec {result.spec}", soft_wrap=True, markup=False)
    return exitcodes.OK
