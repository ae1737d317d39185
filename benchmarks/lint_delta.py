"""Do migrated files pass the user's linters? ruff's findings on each file before and after migration.

    python benchmarks/lint_delta.py [DIR ...]

DIRs default to the bundled demo (``fixtures/demo``) and the fixture models (``fixtures/models``).
Each DIR is copied into a temporary directory and migrated there (``migrate run --no-cache``);
then ruff checks every original Python file and its migrated counterpart (the vendored helper
module is not a migrated file and is left out) twice:

- ruff's default rules plus isort (``--select E4,E7,E9,F,I``): the target is no finding on a
  migrated file that ruff does not report on the original;
- line length (``E501``) at the file's own width: the longest line of the original file, at least
  ruff's default 88, so a file written to 120 columns is held to 120.

Prints the findings per code before and after, and each finding that is new after migration.
Needs ruff (a test extra: ``pip install -e ".[test]"``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DIRS = [REPO / "fixtures" / "demo", REPO / "fixtures" / "models"]
DEFAULT_RULES = "E4,E7,E9,F,I"  # ruff's default rule set plus isort
RUFF_DEFAULT_WIDTH = 88


def ruff(path: Path, *options: str) -> List[dict]:
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache", "--output-format", "json",
                           *options, str(path)], capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"ruff failed on {path}: {done.stderr}")
    return json.loads(done.stdout or "[]")


def width(path: Path) -> int:
    lines = path.read_text(encoding="utf-8").splitlines() or [""]
    return max(RUFF_DEFAULT_WIDTH, max(len(line) for line in lines))


def new_findings(before: List[dict], after: List[dict]) -> List[dict]:
    """The findings after migration beyond those before, matched by code and message."""
    left = Counter((f["code"], f["message"]) for f in before)
    out = []
    for f in after:
        key = (f["code"], f["message"])
        if left[key]:
            left[key] -= 1
        else:
            out.append(f)
    return out


def compare(source: Path, migrated: Path) -> Dict[str, Counter]:
    totals = {"before": Counter(), "after": Counter(), "new": Counter()}
    for original in sorted(source.rglob("*.py")):
        rel = original.relative_to(source)
        result = migrated / rel
        if not result.is_file():
            continue
        own = width(original)
        for options in (("--select", DEFAULT_RULES), ("--select", "E501", "--line-length", str(own))):
            before, after = ruff(original, *options), ruff(result, *options)
            totals["before"].update(f["code"] for f in before)
            totals["after"].update(f["code"] for f in after)
            for f in new_findings(before, after):
                totals["new"][f["code"]] += 1
                print(f"  new: {rel}:{f['location']['row']}:{f['location']['column']}: {f['code']} {f['message']}"
                      + (f" (file width {own})" if f["code"] == "E501" else ""))
    return totals


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directories", nargs="*", type=Path)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="npu-migrate-lint-"))
    try:
        grand = Counter()
        for source in args.directories or DEFAULT_DIRS:
            copy = work / source.name
            shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
            done = subprocess.run([sys.executable, "-m", "npu_migrate.migrate", "run", str(copy), "--no-cache",
                                   "--report-dir", str(work / f"{source.name}-report")],
                                  capture_output=True, text=True)
            if done.returncode not in (0, 16):
                raise SystemExit(f"migrate run {source} failed ({done.returncode}): {done.stderr[-2000:]}")
            print(f"{source.relative_to(REPO) if REPO in source.parents else source}:")
            totals = compare(copy, work / f"{source.name}-npu")
            for name in ("before", "after", "new"):
                counts = ", ".join(f"{code} {n}" for code, n in sorted(totals[name].items())) or "none"
                print(f"  {name:>6}: {sum(totals[name].values())} ({counts})")
            grand.update(totals["new"])
        print(f"new findings in all: {sum(grand.values())}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
