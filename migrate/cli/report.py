"""``migrate report DIR``: rebuild ``report.html`` from a report directory, e.g. with a parity result.

``migrate run`` writes report.json and changes.patch into its report directory; this command reads
them back (nothing else: the page can be made on another machine) and renders the review page,
adding the result of ``migrate parity --json FILE`` when ``--parity FILE`` is given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from .. import exitcodes
from .app import app
from ..console import console, out


@app.command("report")
def report(
    report_dir: Path = typer.Argument(Path("npu-migrate-report"), metavar="[DIR]", help="A report directory written by `migrate run` (default: ./npu-migrate-report)."),
    parity: Optional[Path] = typer.Option(None, "--parity", metavar="FILE", help="A `migrate parity --json` result to show on the page and in report.md."),
    out_path: Optional[Path] = typer.Option(None, "--out", metavar="FILE", help="Write the page here (default: DIR/report.html)."),
    statistics: bool = typer.Option(False, "--statistics", help="Print the number of findings per code from DIR/report.json (nothing is migrated again or written)."),
) -> None:
    """Rebuild the HTML review page from report.json and changes.patch (plus a parity result).

    With --parity, report.md is written again too, with the parity result. With --statistics,
    print the findings per code of that run instead (like `migrate run --statistics`, without
    migrating anything)."""
    from ..outputs import JSON_NAME, ReportDirError, read_json, rebuild_html

    try:
        if statistics:
            from .summary import statistics as table

            typer.echo(table(read_json(report_dir / JSON_NAME, "report")), nl=False)
            return
        page = rebuild_html(report_dir, read_json(parity, "parity result") if parity else None, out_path)
    except ReportDirError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(exitcodes.CONFIG_ERROR)
    out.print(f"Review page: {page}", soft_wrap=True, markup=False)
