"""``migrate parity``: prove a migration by running both models on the emulated NPU."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from .. import exitcodes
from .app import app
from .extras import missing_torch
from ..console import console, out
from ..lifeline import terminate_as_interrupt
from ..outputs.atomic import write_atomic


MAX_LOG_WIDTH = 240  # columns of the report when stdout is not a terminal


class Backing(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


parity_app = typer.Typer(invoke_without_command=True, no_args_is_help=False, rich_markup_mode=None)
app.add_typer(parity_app, name="parity")


@parity_app.callback()
def parity(
    ctx: typer.Context,
    spec: Optional[Path] = typer.Option(None, "--spec", metavar="FILE", help="Parity spec (YAML) listing the cases (`migrate parity init` writes one)."),
    original: Optional[Path] = typer.Option(None, "--original", metavar="DIR", help="Original tree (default: the spec's directory)."),
    migrated: Optional[Path] = typer.Option(None, "--migrated", metavar="DIR", help="Migrated tree (default: <original>-npu)."),
    json_out: Optional[Path] = typer.Option(None, "--json", metavar="FILE", help="Write the report as JSON to this file."),
    backing: Backing = typer.Option(Backing.cpu, "--backing", help="Device the emulated NPU computes on."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=0.001, help="Seconds one run of a case may take when its spec sets no `timeout:` (default 300); a run past it is stopped and reported as timed out."),
) -> None:
    """Run the original and the migrated model side by side and compare outputs and gradients.

    Exit code: 0 when every case passes, 64 when one does not (it diverged, the migrated model
    raised, or the emulation cannot run it), plus 128 when a numerics-changing rewritten site in a
    file the runs imported never took its fused path (not proven: see the per-site table), plus
    32 when a case could not be set up (a spec reference, tree or checkpoint problem, or an
    original model that does not run) or the spec is invalid (32 alone); 130 when interrupted
    (Ctrl-C or SIGTERM: the worker processes are stopped). Needs torch (the parity extra): without
    it, says what to install and exits 32.

    `migrate parity init [PATH]` writes a spec for a migrated tree (see its --help)."""
    if ctx.invoked_subcommand is not None:
        return
    if spec is None:
        console.print("[red]error:[/] give the spec with --spec FILE (`migrate parity init PATH` writes one)", soft_wrap=True)
        raise typer.Exit(exitcodes.USAGE_ERROR)
    missing = missing_torch("migrate parity")
    if missing:
        console.print(f"[red]error:[/] {escape(missing)}", soft_wrap=True)
        raise typer.Exit(exitcodes.CONFIG_ERROR)
    raise typer.Exit(run_and_show(spec, original, migrated, backing.value, json_out, to=out, timeout=timeout))


def run_and_show(spec: Path, original: Optional[Path], migrated: Optional[Path], backing: str,
                 json_out: Optional[Path] = None, to: Console = out, timeout: Optional[float] = None) -> int:
    """Run a parity spec, print the table (on ``to``: stdout, the command's output), write the JSON;
    returns the exit code. Progress and spec problems go to stderr. ``timeout``: see ``run_parity``."""
    from ..parity import SpecError, render, run_parity  # imports torch: only when needed

    try:
        with terminate_as_interrupt(), console.status("parity: starting") as status:
            report = run_parity(spec, original, migrated, backing,
                                progress=lambda message: status.update(f"parity: {message}"), timeout=timeout)
    except SpecError as error:
        for problem in error.problems:
            console.print(problem, markup=False, soft_wrap=True)
        return exitcodes.CONFIG_ERROR
    except KeyboardInterrupt:
        console.print("[red]interrupted:[/red] the parity run was stopped (its worker processes too)", soft_wrap=True)
        return exitcodes.INTERRUPTED
    renderable = render(report)
    target = to if to.is_terminal else Console(file=to.file, highlight=False, width=log_width(renderable))
    target.print(renderable)
    if json_out is not None:
        write_atomic(json_out, (json.dumps(report.to_json(), indent=2) + "\n").encode())
    code = exitcodes.OK if report.passed else exitcodes.PARITY_FAILED
    code |= exitcodes.NOT_PROVEN if report.not_proven else 0
    return code | (exitcodes.CONFIG_ERROR if report.setup_failed else 0)


def log_width(renderable) -> int:
    """The width the report needs in a log or a pipe, where Rich would squash it into 80 columns
    (between the console's width and ``MAX_LOG_WIDTH``)."""
    needed = console.measure(renderable, options=console.options.update_width(MAX_LOG_WIDTH)).maximum
    return max(console.width, min(needed, MAX_LOG_WIDTH))
