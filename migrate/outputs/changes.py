"""The file changes a run produces: each migrated file, plus the helper beside the files that import it.

The helper (``npu_glue``) is vendored beside the file that imports it, as ``<dir>/npu_glue.py``,
holding the sections that directory's files call; ``outputs.vendored`` decides per directory whether
it is written, upgraded, kept or refused. The files of a directory whose helper is refused, or
whose kept edited copy lacks a name they call, are turned into NPU011 error results (left
unchanged), so no migrated file imports a helper, or a name of it, that is not there.
"""

from __future__ import annotations

from typing import List

from .. import diagnostics
from ..diffs import Change
from ..findings import error_result
from ..helpers import HELPER
from ..helpers.assemble import used_names
from ..runner import RunResult
from .vendored import helper_path, note_kept, plan_copies

__all__ = ["Change", "collect_changes", "helper_path"]  # the outputs read Change and helper_path here


def collect_changes(run: RunResult) -> List[Change]:
    """Every file to write, sorted by path; the files whose helper cannot be there become NPU011
    errors in ``run.files``, and a kept edited helper gets an NPU018 warning."""
    copies = plan_copies(run)
    for i, result in enumerate(run.files):
        if result.status != "changed" or HELPER not in result.helpers:
            continue
        why = copies[helper_path(result.path)].blocks(used_names(result.migrated or ""))
        if why is not None:
            run.files[i] = error_result(result.path, diagnostics.HELPER_CONFLICT,
                                        f"{why}; this file needs the helper and is left unchanged")
    note_kept(run, copies)
    changes = {r.path: Change(r.path, r.original, r.migrated, diff=r.diff) for r in run.changed}
    changes.update((copy.path, copy.change) for copy in copies.values() if copy.change is not None)
    return [changes[p] for p in sorted(changes)]
