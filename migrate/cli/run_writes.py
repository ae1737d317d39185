"""What a ``migrate run`` that writes does after migrating: the migrated tree (or the in-place
changes), the reports and where they went; and ``--resume``/``--revert`` of an in-place run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from rich.markup import escape

from .. import exitcodes
from .run_paths import ConfigError, Paths, confine
from ..console import console
from ..lifeline import terminate_as_interrupt

if TYPE_CHECKING:
    from .run_options import RunOptions


def _write(result, changes, paths: Paths, backup: bool, identity: Optional[dict] = None) -> bool:
    """Write the tree (or the in-place changes); returns whether Ctrl-C stopped the writing.

    The outcome lands in ``result.written`` either way, so the reports say what was written."""
    from ..outputs.in_place import write_in_place
    from ..outputs.journal import journal_dir
    from ..outputs.tree import STAGING_DIR, mark_unwritten, python_paths, write_tree
    from ..runner import WriteOutcome

    if paths.out_dir is None:
        result.written = WriteOutcome(str(paths.root), journal=str(journal_dir(paths.report_dir)))
        intended = [c.path for c in changes]
    else:
        result.written = WriteOutcome(str(paths.out_dir))
        intended = sorted({*result.copied, *python_paths(result), *(c.path for c in changes)})
    try:
        if paths.out_dir is None:
            write_in_place(paths.root, changes, backup, journal_dir(paths.report_dir), result.written, identity)
        else:
            write_tree(result, changes, paths.out_dir, result.written, staging=paths.report_dir / STAGING_DIR)
    except KeyboardInterrupt:
        outcome = result.written
        outcome.complete = False
        for rel in intended:
            if rel not in outcome.written and rel not in outcome.failed:
                outcome.failed[rel] = "not written: the run was interrupted"
        mark_unwritten(result, outcome)
        return True
    return False


def _write_reports_and_say(paths: Paths, result, patch, report: dict, options: RunOptions, interrupted: bool,
                           talk, cache=None) -> bool:
    """Write the reports and say where everything went (unless --quiet); returns whether the reports
    were written. ``patch``: its text or the function that makes it; ``cache``: see ``write_reports``."""
    from ..outputs import PATCH_NAME, write_reports
    from ..outputs.patch import apply_command

    outcome = result.written
    try:
        reports = write_reports(paths.report_dir, result, patch, report=report, parity=options.parity, cache=cache)
    except OSError as exc:
        console.print(f"[red]error:[/red] the reports could not be written: {escape(str(exc.filename or paths.report_dir))}: "
                      f"{escape(exc.strerror or str(exc))}", soft_wrap=True)
        reports = None
    if options.quiet:
        return reports is not None
    if outcome is not None:
        if paths.out_dir is None:
            where = f"in place in {paths.root}" + (f" ({len(outcome.backups)} backups <file>.orig)" if outcome.backups else "")
        else:
            where = str(paths.out_dir)
        state = "" if outcome.complete and not outcome.failed else \
            f" ({len(outcome.written)} files written, {len(outcome.failed)} not written{', interrupted' if interrupted else ''})"
        talk.print(f"Migrated tree: {escape(where)}{state}", soft_wrap=True)
        if not outcome.complete and outcome.journal:
            talk.print(f"In-place journal: {escape(outcome.journal)} (finish with --resume, undo with --revert)",
                       soft_wrap=True)
    if reports is not None:
        talk.print(f"Patch:   {reports[PATCH_NAME]}  (apply: {apply_command(paths.root, reports[PATCH_NAME])})",
                   soft_wrap=True, markup=False)
        talk.print("Reports: " + ", ".join(str(reports[name]) for name in reports if name != PATCH_NAME),
                   soft_wrap=True, markup=False)
    return reports is not None


def finish_in_place(path: Path, report_dir: Optional[Path], in_place: bool, resume: bool, revert: bool) -> int:
    """``--resume`` / ``--revert``: finish or undo an in-place run from its journal."""
    from ..outputs.in_place import finish_journal
    from ..outputs.lock import LockedError, locked

    if not in_place or (resume and revert):
        raise ConfigError("--resume and --revert go with --in-place, one at a time")
    paths = confine(path, None, True, report_dir)
    try:
        with terminate_as_interrupt(), locked([(paths.root, "PATH"), (paths.report_dir, "report directory")]):
            outcome = finish_journal(paths.report_dir, paths.root, forward=resume)
    except LockedError as exc:
        raise ConfigError(str(exc)) from exc
    verb = "finished" if resume else "reverted"
    console.print(f"In-place run {verb}: {len(outcome.written)} files written, {len(outcome.failed)} not written",
                  soft_wrap=True)
    for rel, why in sorted(outcome.failed.items()):
        console.print(f"[red]not written:[/red] {escape(rel)}: {escape(why)}", soft_wrap=True)
    return exitcodes.FILE_ERRORS if outcome.failed else exitcodes.OK
