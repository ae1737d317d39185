"""Hostile inputs: each case is a small tree with one hostile file (or setting) beside an ordinary
file, migrated by the real ``migrate run`` as a whole process.

    python benchmarks/hostile_inputs.py [--jobs N] [--keep DIR]

Prints per case: the exit code (and the expected one), whether the ordinary file was migrated,
the hostile file's diagnostic, the peak memory of the run (max RSS of the run and its workers)
and the wall time; then whether any file outside ``--out``/``--report-dir`` changed and whether a
traceback appeared. Everything is built under a temporary directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OK = "import torch\n\nx = torch.zeros(3).cuda()\n"
ELIF = "import torch\n\ndef f(x):\n    if x == 0:\n        return 0\n" + "".join(
    f"    elif x == {i}:\n        return torch.zeros({i}).cuda()\n" for i in range(1, 1000))


def _cases():
    """name -> (files, extra args, expected exit code, hostile file)."""
    return {
        "nested-parens-1500": ({"deep.py": "import torch\nx = " + "(" * 1500 + "1" + ")" * 1500 + ".cuda()\n"}, [], 16, "deep.py"),
        "elif-chain-1000": ({"dispatch.py": ELIF}, [], 16, "dispatch.py"),
        "file-50MB": ({"table.py": "import torch\nT = [\n" + "    1.0,\n" * 5_600_000 + "]\n"}, [], 16, "table.py"),
        "expression-100k-terms": ({"poly.py": "import torch\nx = " + " + ".join(f"a{i}" for i in range(100_000))
                                   + "\ny = x.cuda()\n"}, ["--file-timeout", "10"], 16, "poly.py"),
        "not-utf8": ({"latin1.py": b"# caf\xe9\nx = t.cuda()\n"}, [], 16, "latin1.py"),
        "newline-in-name": ({"new\nline.py": OK}, [], 16, "new\\nline.py"),
        "non-utf8-name": ({os.fsdecode(b"caf\xe9.py"): OK}, [], 16, "caf\\xe9.py"),
        "user-npu_glue": ({"npu_glue.py": "MINE = 1\n", "norm.py": _RMS}, [], 16, "norm.py"),
        "npu_glue-symlink": ({"norm.py": _RMS, "npu_glue.py": ("link", "/etc/passwd")}, [], 16, "norm.py"),
        "out-is-link-to-path": ({}, ["--out", "{link}"], 32, None),
        "report-dir-is-path": ({"report.md": "# mine\n"}, ["--report-dir", "{repo}"], 32, None),
        "report-dir-is-a-file": ({}, ["--report-dir", "{repo}/../a-file"], 32, None),
    }


_RMS = '''import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
'''


# Runs the command as a child and prints the largest max RSS among its processes (run + workers).
_MEASURE = ("import resource, subprocess, sys\n"
            "code = subprocess.call(sys.argv[1:])\n"
            "print('PEAK_KB=%d' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
            "sys.exit(code)\n")


def _write(repo: Path, files: dict) -> None:
    repo.mkdir(parents=True)
    (repo / "ok.py").write_text(OK)
    for name, content in files.items():
        if isinstance(content, tuple):
            os.symlink(content[1], repo / name)
        else:
            (repo / name).write_bytes(content if isinstance(content, bytes) else content.encode())


def _snapshot(base: Path, skip) -> dict:
    found = {}
    for path in base.rglob("*"):
        if any(s == path or s in path.parents for s in skip) or path.is_symlink() or not path.is_file():
            continue
        found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="2")
    parser.add_argument("--keep", type=Path, help="build the cases here and keep them")
    args = parser.parse_args(argv)
    base = (args.keep or Path(tempfile.mkdtemp(prefix="npu-migrate-hostile-"))).resolve()
    rows, bad = [], 0
    print(f"{'case':24} {'exit':>9} {'others migrated':>16} {'peak MB':>8} {'wall s':>7}  hostile file")
    for name, (files, extra, expected, hostile) in _cases().items():
        case = base / name
        repo, out, reports = case / "repo", case / "out", case / "reports"
        _write(repo, files)
        if "{link}" in extra:
            os.symlink(repo, case / "link")
        (case / "a-file").write_text("not a directory\n")
        extra = [a.replace("{link}", str(case / "link")).replace("{repo}", str(repo)) for a in extra]
        outside = _snapshot(case, [out, reports])
        command = [sys.executable, "-m", "npu_migrate.migrate", "run", str(repo), "--jobs", args.jobs, "--no-cache"]
        if "--out" not in extra:
            command += ["--out", str(out)]
        if "--report-dir" not in extra:
            command += ["--report-dir", str(reports)]
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _MEASURE, *command, *extra], capture_output=True, text=True, cwd=case)
        wall = time.perf_counter() - start
        peak_line = done.stderr.rstrip().rsplit("\n", 1)[-1]
        peak = int(peak_line.split("=")[1]) / 1024 if peak_line.startswith("PEAK_KB=") else float("nan")
        done.stderr = done.stderr.rstrip().rsplit("\n", 1)[0] if peak_line.startswith("PEAK_KB=") else done.stderr
        migrated = (out / "ok.py").is_file() and ".npu()" in (out / "ok.py").read_text()
        diagnostic = "-"
        if hostile and (reports / "report.json").is_file():
            entries = {f["path"]: f for f in json.loads((reports / "report.json").read_text())["files"]}
            entry = entries.get(hostile)
            diagnostic = (entry["error"] or entry["status"])[:70] if entry else "(not in report)"
        elif not hostile:
            diagnostic = done.stderr.strip().splitlines()[-1][:70] if done.stderr.strip() else "-"
        changed_outside = outside != _snapshot(case, [out, reports])
        traceback = "Traceback" in done.stderr
        ok = done.returncode == expected and not changed_outside and not traceback and (migrated or not hostile)
        bad += not ok
        print(f"{name:24} {done.returncode:>4} ({expected:>2}) {('yes' if migrated else 'no'):>16} {peak:>8.0f} "
              f"{wall:>7.1f}  {diagnostic}{'' if ok else '   <-- UNEXPECTED'}"
              + ("  [wrote outside --out/--report-dir]" if changed_outside else "")
              + ("  [traceback]" if traceback else ""))
        rows.append(name)
    print(f"{len(rows)} cases, {bad} unexpected; peak MB: the largest max RSS among the run's processes")
    if args.keep is None:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
