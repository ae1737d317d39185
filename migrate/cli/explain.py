"""``migrate explain CODE``: print the doc page of a diagnostic code (or list all codes)."""

from __future__ import annotations

from typing import Optional

import typer
from rich.markdown import Markdown

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.cli.app import app
from npu_migrate.migrate.console import console
from npu_migrate.migrate.diagnostics import all_codes, doc_page


@app.command("explain")
def explain(code: Optional[str] = typer.Argument(None, help="A diagnostic code such as NPU201; omit to list all codes.")) -> None:
    """Print what a diagnostic code means, why, an example, and how safe its fix is."""
    if code is None:
        for known, summary in all_codes().items():
            console.print(f"[bold]{known}[/]  {summary}")
        return
    page = doc_page(code)
    if page is None:
        console.print(f"[red]unknown diagnostic code {code!r}[/]; `migrate explain` lists them all")
        raise typer.Exit(exitcodes.USAGE_ERROR)
    console.print(Markdown(page))
