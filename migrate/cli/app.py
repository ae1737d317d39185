import typer

app = typer.Typer(
    name="migrate",
    help="Port PyTorch model code to Huawei Ascend NPUs: rewrite, report, prove parity.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
