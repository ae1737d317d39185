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

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.cli.app import app
from npu_migrate.migrate.console import console


@app.command("report")
def report(
    report_dir: Path = typer.Argument(Path("npu-migrate-report"), help="A report directory written by `migrate run`."),
    parity: Optional[Path] = typer.Option(None, "--parity", help="A `migrate parity --json` result to show on the page."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the page here (default: DIR/report.html)."),
) -> None:
    """Rebuild the HTML review page from report.json and changes.patch (plus a parity result)."""
    from npu_migrate.migrate.outputs import ReportDirError, read_json, rebuild_html

    try:
        page = rebuild_html(report_dir, read_json(parity, "parity result") if parity else None, out)
    except ReportDirError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(exitcodes.CONFIG_ERROR)
    console.print(f"Review page: {page}", soft_wrap=True)
