"""Running a parity spec: one worker process per side, then the comparison in this process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

import torch

from npu_migrate.migrate.parity.compare import compare_case
from npu_migrate.migrate.parity.report import ParityReport
from npu_migrate.migrate.parity.spec import SpecError, load_spec

OUTPUT_TAIL_LINES = 15


def default_migrated(original: Path) -> Path:
    """The migrated tree beside the original: ``<dir>-npu``."""
    return original.with_name(original.name + "-npu")


class _Worker:
    """One side's worker process; its result is read once it has exited."""

    def __init__(self, side: str, tree: Path, other_tree: Path, spec: Path, backing: str, tmp: Path):
        self.side = side
        self.result_path = tmp / f"{side}.pt"
        request = tmp / f"{side}.json"
        request.write_text(json.dumps({
            "side": side, "tree": str(tree), "other_tree": str(other_tree), "spec": str(spec), "backing": backing,
            "result": str(self.result_path),
        }))
        env = dict(os.environ)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "npu_migrate.migrate.parity.worker", str(request)],
            cwd=tmp, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )

    def finish(self, stdin: str = "") -> dict:
        """Wait for the worker; its results, or ``{"fatal": why}`` when it produced none."""
        output, _ = self.process.communicate(stdin)
        if self.process.returncode == 0 and self.result_path.exists():
            return torch.load(self.result_path, weights_only=True)
        tail = "\n".join(output.strip().splitlines()[-OUTPUT_TAIL_LINES:])
        return {"fatal": f"the worker process exited with code {self.process.returncode}:\n{tail}"}


def run_parity(spec: Path, original: Optional[Path] = None, migrated: Optional[Path] = None,
               backing: str = "cpu", progress: Optional[Callable[[str], None]] = None) -> ParityReport:
    """Run every case of ``spec`` on both trees; raises ``SpecError`` for an invalid spec or paths."""
    spec = Path(spec).resolve()
    parsed = load_spec(spec)
    original = Path(original or parsed.original or parsed.directory).resolve()
    migrated = Path(migrated or parsed.migrated or default_migrated(original)).resolve()
    for side, tree in (("original", original), ("migrated", migrated)):
        if not tree.is_dir():
            raise SpecError([f"{spec}: the {side} tree {tree} is not a directory"])
    notify = progress or (lambda message: None)

    with tempfile.TemporaryDirectory(prefix="migrate-parity-") as tmp:
        notify("running the original and the migrated model")
        original_worker = _Worker("original", original, migrated, spec, backing, Path(tmp))
        migrated_worker = _Worker("migrated", migrated, original, spec, backing, Path(tmp))
        original_results = original_worker.finish()
        handover = "" if "fatal" in original_results else str(original_worker.result_path)
        migrated_results = migrated_worker.finish(handover + "\n")
        notify("comparing")
        report = ParityReport(str(spec), str(original), str(migrated), backing)
        for case in parsed.cases:
            for dtype in case.dtypes:
                report.cases.append(compare_case(
                    case, dtype,
                    _side_result(original_results, case, dtype),
                    _side_result(migrated_results, case, dtype),
                ))
    return report


def _side_result(results: dict, case, dtype: str) -> Optional[dict]:
    """One side's result for a case and dtype; a failed worker becomes that case's error."""
    if "fatal" in results:
        return {"error": results["fatal"]}
    return results["cases"].get(case.name, {}).get(dtype)
