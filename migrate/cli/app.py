from typing import Optional

import typer

from .. import __version__

app = typer.Typer(
    name="migrate",
    help="Port PyTorch model code to Huawei Ascend NPUs: rewrite, report, prove parity.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: no <bool> placeholders, paragraphs wrapped to any width
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"migrate (npu-migrate) {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")) -> None:
    """Port PyTorch model code to Huawei Ascend NPUs: rewrite, report, prove parity."""
