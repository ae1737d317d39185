"""``migrate explain CODE``: print the doc page of a diagnostic code (or list all codes).

Printing one page reads only that page (no rule is imported), so it answers at once.
"""

from __future__ import annotations

import re
from typing import Optional

import typer

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.cli.app import app
from npu_migrate.migrate.console import console


@app.command("explain")
def explain(code: Optional[str] = typer.Argument(None, help="A diagnostic code such as NPU201; omit to list all codes.")) -> None:
    """Print what a diagnostic code means, why, an example, and how safe its fix is."""
    from npu_migrate.migrate.diagnostics import doc_page

    if code is None:
        from npu_migrate.migrate.outputs.codes import catalogue

        for info in catalogue().values():
            console.print(f"[bold]{info.code}[/]  {info.summary}", soft_wrap=True)
        return
    page = doc_page(code) if re.fullmatch(r"NPU\d{3}", code.strip().upper()) else None
    if page is None:
        console.print(f"[red]unknown diagnostic code {code!r}[/]; `migrate explain` lists them all")
        raise typer.Exit(exitcodes.USAGE_ERROR)
    from rich.markdown import Markdown

    console.print(Markdown(page))
