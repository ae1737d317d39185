"""What a run writes: the migrated tree or in-place changes, ``changes.patch``, the reports."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

from npu_migrate.migrate.outputs import report_json, report_md
from npu_migrate.migrate.outputs.atomic import write_atomic
from npu_migrate.migrate.runner import RunResult

PATCH_NAME = "changes.patch"


def write_reports(report_dir: Path, run: RunResult, patch: str) -> Dict[str, Path]:
    """Write ``changes.patch``, ``report.json`` and ``report.md`` into ``report_dir``."""
    texts = {PATCH_NAME: patch, "report.json": report_json.render(run), "report.md": report_md.render(run)}
    paths = {}
    for name, text in texts.items():
        paths[name] = Path(report_dir) / name
        write_atomic(paths[name], text.encode("utf-8", "backslashreplace"))  # odd file names
    return paths
