"""``migrate demo``: the main job on a bundled repo — migrate it, show the patch and the report,
then prove the migration with a parity run."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Optional

import typer

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.cli.app import app
from npu_migrate.migrate.cli.parity import run_and_show
from npu_migrate.migrate.cli.run import run_migration
from npu_migrate.migrate.console import console

DEMO_REPO = Path(__file__).resolve().parents[2] / "fixtures" / "demo"


@app.command("demo")
def demo(
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="Where to put the demo (default: a new temporary directory)."),
    parity: bool = typer.Option(True, "--parity/--no-parity", help="End with a parity run of the original and migrated model."),
) -> None:
    """Migrate the bundled demo repo (a small Llama-style training repo) and check the result."""
    if not DEMO_REPO.is_dir():
        console.print(f"[red]error:[/] the demo repo is not at {DEMO_REPO}; install npu-migrate from its "
                      "source tree (pip install -e .) to run the demo")
        raise typer.Exit(exitcodes.CONFIG_ERROR)
    base = (workdir or Path(tempfile.mkdtemp(prefix="npu-migrate-demo-"))).resolve()
    repo, out, reports = base / "demo", base / "demo-npu", base / "npu-migrate-report"
    if repo.exists() or out.exists():
        console.print(f"[red]error:[/] {repo} or {out} already exists; give an empty --workdir")
        raise typer.Exit(exitcodes.CONFIG_ERROR)
    shutil.copytree(DEMO_REPO, repo, ignore=shutil.ignore_patterns("__pycache__"))
    console.print(f"Demo repo copied to {repo}", soft_wrap=True)

    code = run_migration(path=repo, out=out, in_place=False, force=False, report_dir=reports, opmap=[], select=None,
                         ignore=None, jobs=None, check=False, diff=False)
    if code & (exitcodes.CONFIG_ERROR | exitcodes.FILE_ERRORS):
        raise typer.Exit(code)
    console.print(f"Review the diff: {reports / 'changes.patch'}\nRead the report: {reports / 'report.md'} "
                  f"(or open {reports / 'report.html'})", soft_wrap=True)
    if parity:
        console.print(f"Parity: {repo / 'parity.yaml'} (original {repo} vs migrated {out})", soft_wrap=True)
        code |= run_and_show(repo / "parity.yaml", repo, out, "cpu", reports / "parity.json")
        if (reports / "parity.json").is_file():
            from npu_migrate.migrate.outputs import read_json, rebuild_html

            page = rebuild_html(reports, read_json(reports / "parity.json", "parity result"))
            console.print(f"Review page (with the parity result): {page}", soft_wrap=True)
    raise typer.Exit(code)
