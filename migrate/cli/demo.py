"""``migrate demo``: the main job on a bundled repo — migrate it, show the patch and the report,
then prove the migration with a parity run."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from .. import exitcodes
from .app import app
from .extras import missing_torch
from .parity import run_and_show
from .run import RunOptions, run_migration
from .run_paths import ConfigError
from ..console import console, out

DEMO_REPO = Path(__file__).resolve().parents[2] / "fixtures" / "demo"


@app.command("demo")
def demo(
    workdir: Optional[Path] = typer.Option(None, "--workdir", metavar="DIR", help="Where to put the demo (default: a new temporary directory)."),
    parity: bool = typer.Option(True, "--parity/--no-parity", help="End with a parity run of the original and migrated model (needs the parity extra: torch)."),
) -> None:
    """Migrate the bundled demo repo (a small Llama-style training repo) and check the result.

    The story goes to stdout (where the demo is, the migration's summary, where the patch and the
    reports are, the parity table); errors to stderr."""
    if not DEMO_REPO.is_dir():
        console.print(f"[red]error:[/] the demo repo is not at {DEMO_REPO}; install npu-migrate from its "
                      "source tree (pip install -e .) to run the demo")
        raise typer.Exit(exitcodes.CONFIG_ERROR)
    base = (workdir or Path(tempfile.mkdtemp(prefix="npu-migrate-demo-"))).resolve()
    repo, migrated, reports = base / "demo", base / "demo-npu", base / "npu-migrate-report"
    if repo.exists() or migrated.exists():
        console.print(f"[red]error:[/] {repo} or {migrated} already exists; give an empty --workdir")
        raise typer.Exit(exitcodes.CONFIG_ERROR)
    shutil.copytree(DEMO_REPO, repo, ignore=shutil.ignore_patterns("__pycache__"))
    out.print(f"Demo repo copied to {repo}", soft_wrap=True)

    try:
        code = run_migration(repo, RunOptions(out=migrated, report_dir=reports))
    except ConfigError as exc:
        console.print(f"[red]error:[/] {exc}", soft_wrap=True)
        raise typer.Exit(exitcodes.CONFIG_ERROR)
    if code & (exitcodes.CONFIG_ERROR | exitcodes.FILE_ERRORS):
        raise typer.Exit(code)
    out.print(f"Review the diff: {reports / 'changes.patch'}\nRead the report: {reports / 'report.md'} "
              f"(or open {reports / 'report.html'})", soft_wrap=True)
    if parity:
        missing = missing_torch("The demo's parity run (migrate parity)")
        if missing:
            console.print(f"[red]error:[/] {escape(missing)}\n(or run `migrate demo --no-parity` for the migration "
                          "alone)", soft_wrap=True)
            raise typer.Exit(code | exitcodes.CONFIG_ERROR)
        out.print(f"Parity: {repo / 'parity.yaml'} (original {repo} vs migrated {migrated})", soft_wrap=True)
        code |= run_and_show(repo / "parity.yaml", repo, migrated, "cpu", reports / "parity.json", to=out)
        if (reports / "parity.json").is_file():
            from ..outputs import read_json, rebuild_html

            page = rebuild_html(reports, read_json(reports / "parity.json", "parity result"))
            out.print(f"Review page and report.md (with the parity result): {page}", soft_wrap=True)
    raise typer.Exit(code)
