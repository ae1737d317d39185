"""Migrate real repositories and check that the report tells the truth (issue: sound rewrites).

For litgpt, torchtune and mistral-inference (``pip install --no-deps --target`` into a scratch
directory, never copied here) and the installed transformers models, print per repository:

- component sites seen (attention, rotary, RMS norm, gated MLP, router), fused, reported, and how
  many of the reported ones only the residual pass caught;
- silent: components the detectors see with no finding of their family in report.json (an
  independent check of the report, not the engine's own pass);
- missing: sites reported as rewritten that a second ``migrate run`` on the migrated tree finds
  again (their edit is not in the output), plus NPU006 (rewrites left out because they overlapped);
- broken imports: modules that import in the original (under ``kernels.emulate_cuda()``) but not
  in the migrated tree (under ``kernels.emulate()``).

Targets: silent 0, missing 0, broken imports 0.

Run: ``python benchmarks/real_repos.py [--workdir DIR] [--only NAME ...] [--no-imports]``
(several minutes; the whole transformers/models tree is the slow part).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # noqa: E402

HERE = Path(__file__).resolve().parent


def imports(side: str, root: Path, package: Optional[str]) -> Dict[str, Optional[str]]:
    args = [str(root), package] if package else [str(root), "--transformers"]
    deps = corpus.dependencies()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(deps) if deps else None,
                                                                     os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, str(HERE / "import_check.py"), side, *args],
                          capture_output=True, text=True, timeout=3600, env=env)
    marker = done.stdout.rfind("@@RESULTS@@")
    if marker < 0:
        return {"<all>": corpus.first_error(done.stderr) or f"exit {done.returncode}"}
    return json.loads(done.stdout[marker + len("@@RESULTS@@"):])


def broken_imports(run: corpus.Run) -> tuple:
    """(modules importing in the original, those of them that fail in the migrated tree)."""
    if run.name == "transformers":
        original = imports("original", run.source.parent, None)
        migrated = imports("migrated", run.out.parent if run.out.name == "models" else run.out, None)
    else:
        original = imports("original", run.source.parent, run.source.name)
        migrated = imports("migrated", run.out.parent, run.source.name)
    fine = [m for m, error in original.items() if error is None]
    return fine, {m: migrated.get(m, "not imported") for m in fine if migrated.get(m, "not imported") is not None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--no-imports", action="store_true", help="skip the import check")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="real-repos-"))
    targets = {k: v for k, v in corpus.repos().items() if not args.only or k in args.only}
    print(f"corpus: {corpus.versions()}; work dir {workdir}")
    rows, details = [], []
    for name, source in targets.items():
        run = corpus.migrate(name, source, workdir, "--jobs", "2")
        summary = run.report.get("summary", {})
        counts = corpus.family_counts(run.report)
        silent = corpus.silent(source, run.report)
        again = corpus.migrate(f"{name}-again", run.out, workdir / "again", "--jobs", "2")
        missing = again.report.get("summary", {}).get("sites_rewritten", "?")
        not_applied = sum(1 for f in run.report.get("findings", []) if f["code"] == "NPU006")
        fine, broken = ([], {}) if args.no_imports else broken_imports(run)
        seen = sum(c["seen"] for c in counts.values())
        fused = sum(c["fused"] for c in counts.values())
        reported = sum(c["reported"] for c in counts.values())
        residual = sum(c["residual"] for c in counts.values())
        rows.append([name, summary.get("files_scanned", "?"), f"{run.seconds:.0f}s", seen, fused, reported, residual,
                     len(silent), f"{missing} (+{not_applied} NPU006)",
                     "-" if args.no_imports else f"{len(broken)}/{len(fine)}"])
        for family, c in counts.items():
            details.append([name, family, c["seen"], c["fused"], c["reported"], c["residual"],
                            sum(1 for s in silent if s[2] == family)])
        for path, line, family in silent:
            print(f"  silent: {name}/{path}:{line} {family}")
        for module, error in broken.items():
            print(f"  broken import: {module}: {error}")
    print()
    print(corpus.table(rows, ["repo", "files", "time", "sites", "fused", "reported", "of which residual",
                              "silent", "missing", "broken imports"]))
    print()
    print(corpus.table(details, ["repo", "family", "seen", "fused", "reported", "residual", "silent"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
