"""``migrate run - --stdin-filename NAME``: one file from standard input, for editors.

The file is migrated in memory as if it were NAME (its configuration, its package, the modules
beside it); stdout gets the migrated source (the original when nothing changes), or with ``--diff``
the patch, or with ``--check`` the findings in the chosen format. Nothing is written: a helper
module the migrated code imports is named on stderr (``migrate run`` on the file writes it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from . import formats
from .formats import is_human
from .run_options import RunOptions, UsageError, _exit_code, _load_table, _sarif
from ..console import console, out


def run_stdin(options: RunOptions) -> int:
    """The exit code of the file read from stdin, migrated and printed."""
    from . import summary as show
    from ..outputs import report_json
    from ..runner import RunResult

    name = options.stdin_filename or "-"
    where = Path(name)
    rel = where.name if where.name != "-" else "stdin.py"
    data = sys.stdin.buffer.read()
    if not is_human(options.output_format) and not options.check:
        raise UsageError(f"--output-format {options.output_format} with PATH - needs --check: without it stdout "
                         "carries the migrated source")
    table = _load_table(options.opmap)
    ignored = options.ignored_in(where.resolve()) if options.ignored_in is not None and where.name != "-" else ()
    from ..engine import build_engine
    from ..first_party import first_party_names

    siblings = [p.name for p in where.resolve().parent.glob("*.py")] if where.name != "-" else []
    engine = build_engine(table, options.select, [*(options.ignore or ()), *ignored] or None,
                          first_party_names([*siblings, rel]))
    file_result = engine.migrate(rel, data)
    file_result.path = rel
    run = RunResult(where.resolve().parent if where.name != "-" else Path.cwd(), [file_result])
    from ..outputs.changes import Change
    from ..outputs.patch import build_patch

    changes = [Change(rel, file_result.original, file_result.migrated)] if file_result.status == "changed" else []
    report = report_json.build(run, changes)
    if options.diff:
        typer.echo(build_patch(changes), nl=False)
    elif options.check:
        if is_human(options.output_format):
            show.check_listing(report, changes, where, options.output_format, out)
        else:
            typer.echo(formats.machine(options.output_format, report, run.root,
                                       _sarif(report, run, build_patch(changes))
                                       if options.output_format == "sarif" else None), nl=False)
    else:
        sys.stdout.write(file_result.migrated if file_result.status == "changed" else data.decode("utf-8", "replace"))
        sys.stdout.flush()
        show.listing(report, options.output_format, console)
    show.errors(report, console)
    for helper in file_result.helpers:
        beside = where.resolve().parent / f"{helper}.py"
        if where.name == "-" or not beside.exists():
            console.print(f"note: the migrated code imports the helper module {helper} ({helper}.py beside the file): "
                          f"`migrate run` on the file or its directory writes it", soft_wrap=True, markup=False)
    if not options.quiet:
        show.summary_line(report, console)
    return _exit_code(report, run, changes, options)
