"""``migrate parity``: prove a migration by running both models on the emulated NPU."""

from __future__ import annotations

import json
import os
import tempfile
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from migrate import exitcodes
from migrate.cli.app import app
from migrate.console import console


class Backing(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


def _write_json(path: Path, data: dict) -> None:
    """Atomically: a temp file beside ``path``, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")
    os.replace(tmp, path)


@app.command("parity")
def parity(
    spec: Path = typer.Option(..., "--spec", help="Parity spec (YAML) listing the cases."),
    original: Optional[Path] = typer.Option(None, "--original", help="Original tree (default: the spec's directory)."),
    migrated: Optional[Path] = typer.Option(None, "--migrated", help="Migrated tree (default: <original>-npu)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the report as JSON to this file."),
    backing: Backing = typer.Option(Backing.cpu, "--backing", help="Device the emulated NPU computes on."),
) -> None:
    """Run the original and the migrated model side by side and compare outputs and gradients."""
    from migrate.parity import SpecError, render, run_parity  # imports torch: only when needed

    try:
        with console.status("parity: starting") as status:
            report = run_parity(spec, original, migrated, backing.value,
                                progress=lambda message: status.update(f"parity: {message}"))
    except SpecError as error:
        for problem in error.problems:
            console.print(problem, markup=False, soft_wrap=True)
        raise typer.Exit(exitcodes.CONFIG_ERROR)
    console.print(render(report))
    if json_out is not None:
        _write_json(json_out, report.to_json())
    raise typer.Exit(exitcodes.OK if report.passed else exitcodes.PARITY_FAILED)
