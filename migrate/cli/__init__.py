"""The ``migrate`` command line: one module per command, all registered on one Typer app."""

from npu_migrate.migrate.cli.app import app
from npu_migrate.migrate.cli import demo, explain, ops, parity, run  # noqa: F401  (register the commands)


def main() -> None:
    app()
