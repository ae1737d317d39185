"""``migrate ops list|show NAME|validate FILE``: browse and check the operator table."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from .. import exitcodes
from .app import app
from ..console import console

ops_app = typer.Typer(help="Browse and check the operator table.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(ops_app, name="ops")

OpmapOption = typer.Option(None, "--opmap", metavar="FILE", help="Extra op-table YAML files (extend or override the built-in table).")


def _table(extra: Optional[List[Path]]):
    from ...opmap import SchemaError, load_table

    try:
        return load_table(extra or ())
    except SchemaError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(exitcodes.CONFIG_ERROR)


@ops_app.command("list")
def list_ops(
    status: Optional[str] = typer.Option(None, metavar="STATUS", help="Only records with this status (native, rename, fused, fallback, unsupported)."),
    code: Optional[str] = typer.Option(None, metavar="CODE", help="Only records with this diagnostic code."),
    opmap: Optional[List[Path]] = OpmapOption,
) -> None:
    """List the op-table records on stdout, one line each (api, status, code, target or plan)."""
    rows = []
    for record in _table(opmap).records():
        if (status and record.status != status) or (code and record.code != code.upper()):
            continue
        rows.append((record.api, record.status, record.code or "-", record.target or (record.fallback.plan if record.fallback else "-")))
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(LIST_HEADER)]
    for row in [LIST_HEADER, *rows]:
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    console.print(f"{len(rows)} records", soft_wrap=True)


LIST_HEADER = ("api", "status", "code", "target / plan")


@ops_app.command("show")
def show_op(name: str = typer.Argument(..., metavar="NAME", help="Qualified torch API name, e.g. torch.cuda.synchronize, "
                                                                 "or a named plan, e.g. attention.underflow."),
            opmap: Optional[List[Path]] = OpmapOption) -> None:
    """Show every field of the record that covers NAME, or of the named plan NAME (on stdout)."""
    table = _table(opmap)
    record = table.get(name)
    if record is None:
        named = table.plan(name)
        if named is None:
            console.print(f"[red]no op-table record covers {name}, and no plan has that name[/]")
            raise typer.Exit(exitcodes.CONFIG_ERROR)
        for key, value in (("plan", named.name), ("defined at", named.source), ("fallback.plan", named.fallback.plan),
                           ("fallback.detail", named.fallback.detail)):
            typer.echo(f"{key}: {value}")
        return
    rows = [("api", record.api), ("status", record.status), ("code", record.code), ("target", record.target),
            ("summary", record.summary), ("defined at", record.source)]
    rows += [(f"args.{k}", v) for k, v in record.args.items()]
    rows += [("precondition", p) for p in record.preconditions]
    rows += [(f"tolerance.{d}", f"rtol={t.rtol:g} atol={t.atol:g} ({t.reason})") for d, t in record.tolerance.items()]
    if record.fallback:
        rows += [("fallback.plan", record.fallback.plan), ("fallback.detail", record.fallback.detail)]
    for key, value in rows:
        if value:
            typer.echo(f"{key}: {value}")


@ops_app.command("validate")
def validate(files: List[Path] = typer.Argument(..., metavar="FILE...", help="Op-table YAML files to check.")) -> None:
    """Check op-table files against the schema; problems are printed as file:line: problem, one a line."""
    from ...opmap import SchemaError, load_sections

    failed = False
    for path in files:
        try:
            sections = load_sections(path)
        except SchemaError as exc:
            typer.echo(str(exc))
            failed = True
        else:
            parts = [f"{len(sections.records)} records"]
            parts += [f"{len(getattr(sections, name))} {name}" for name in ("packages", "indexes", "environment", "plans")
                      if getattr(sections, name)]
            typer.echo(f"{path}: {', '.join(parts)} OK")
    raise typer.Exit(exitcodes.CONFIG_ERROR if failed else exitcodes.OK)
