"""``migrate explain CODE``: print the doc page of a diagnostic code (or list all codes).

Printing one page reads only that page (no rule is imported), so it answers at once.
"""

from __future__ import annotations

import re
from typing import Optional

import typer

from .. import exitcodes
from .app import app
from ..console import console, out


@app.command("explain")
def explain(code: Optional[str] = typer.Argument(None, metavar="[CODE]", help="A diagnostic code such as NPU201; omit to list all codes.")) -> None:
    """Print what a diagnostic code means, why, an example, and how safe its fix is.

    The page goes to stdout: rendered in a terminal, as Markdown in a pipe or a file
    (migrate explain NPU302 | less)."""
    from ..diagnostics import doc_page

    if code is None:
        from ..outputs.codes import catalogue

        for info in catalogue().values():
            out.print(f"{info.code}  {info.summary}", soft_wrap=True, markup=False)
        return
    page = doc_page(code) if re.fullmatch(r"NPU\d{3}", code.strip().upper()) else None
    if page is None:
        console.print(f"[red]unknown diagnostic code {code!r}[/]; `migrate explain` lists them all")
        raise typer.Exit(exitcodes.USAGE_ERROR)
    if not out.is_terminal:
        typer.echo(page, nl=not page.endswith("\n"))
        return
    from rich.markdown import Markdown

    out.print(Markdown(page))
