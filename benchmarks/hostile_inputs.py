"""Hostile inputs: each case is a small tree with one hostile file (or setting) beside an ordinary
file, migrated by the real ``migrate run`` as a whole process; and hostile moments and settings
that take several runs (``hostile_procedures``: forged cache entries, kill -9 and SIGTERM of a
run, two runs at once, an in-place run killed during its analysis, parity runs whose models hang,
fork or write).

    python benchmarks/hostile_inputs.py [--jobs N] [--keep DIR] [--only SUBSTRING]

Prints per case: the exit code (and the expected one), whether the ordinary file was migrated,
the processes the case left behind (found by a token in their environment), the peak memory of
the run (max RSS of the run and its workers; plain cases), the wall time and the hostile file's
diagnostic or what the case checked; a case whose files outside its ``--out``/``--report-dir``
(and, where a case needs them, its cache and scratch directories) changed, that printed a
traceback or left a process is unexpected. The last line totals the unexpected results, the
writes outside, the processes left behind and the cache entries accepted from another owner.
Everything is built under a temporary directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile_procedures import PROCEDURES, Outcome, Runner, processes_with  # noqa: E402

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
        # issue 25
        "sites-10000": ({"generated.py": "import torch\n" + "".join(f"y{i} = torch.zeros({i}).cuda()\n"
                                                                   for i in range(10_000))}, [], 0, "generated.py"),
        "bom-cr-mixed-endings": ({"bom.py": "\ufeff" + OK, "cr.py": OK.replace("\n", "\r"),
                                  "mixed.py": "import torch\r\n\nx = torch.zeros(3).cuda()\r# end\r"}, [], 0, "cr.py"),
        "path-over-PATH_MAX": ({("d" * 200 + "/") * 22 + "deep.py": OK}, [], 16, "d" * 30),
        "shebang-script": ({"train": "#!/usr/bin/env python3\n" + OK}, [], 0, "train"),
        "star-import": ({"star.py": "from torch import *\n\nx = zeros(3, device=device('cuda'))\n"}, [], 0, "star.py"),
        "dunder-import": ({"dyn.py": "torch = __import__('torch')\nx = torch.zeros(3).cuda()\n"
                                     "__import__('torch').cuda.synchronize()\n"}, [], 0, "dyn.py"),
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


# what each case checks in the migrated tree beyond the exit code and the ordinary file
NPU = b"import torch_npu  # noqa: F401"
EXPECTED_TEXT = {
    "bom-cr-mixed-endings": {"bom.py": b"\xef\xbb\xbfimport torch\n" + NPU + b"\n\nx = torch.zeros(3).npu()\n",
                             "cr.py": b"import torch\r" + NPU + b"\r\rx = torch.zeros(3).npu()\r",
                             "mixed.py": b"import torch\r\n" + NPU + b"\r\n\nx = torch.zeros(3).npu()\r# end\r"},
    "shebang-script": {"train": b"#!/usr/bin/env python3\nimport torch\n" + NPU + b"\n\nx = torch.zeros(3).npu()\n"},
    "star-import": {"star.py": NPU + b"\nfrom torch import *\n\nx = zeros(3, device=device('npu'))\n"},
}
# directories a case may write besides out/ and reports/ (its cache, the scratch TMPDIR, an
# earlier run's outputs, PATH itself for --in-place)
ALLOWED = ("out", "reports", "warm-out", "warm-reports", "cache", "home-cache", "tmp")
IN_PLACE = {"in-place-killed-resume"}


def _write(repo: Path, files: dict) -> None:
    repo.mkdir(parents=True)
    (repo / "ok.py").write_text(OK)
    for name, content in files.items():
        if isinstance(content, tuple):
            os.symlink(content[1], repo / name)
        elif len(os.fsencode(str(repo / name))) >= 4096:
            _write_deep(repo, name, content)
        else:
            (repo / name).write_bytes(content if isinstance(content, bytes) else content.encode())


def _write_deep(repo: Path, name: str, content: str) -> None:
    """A file past PATH_MAX, made one directory at a time (relative to the parent's descriptor)."""
    *directories, file_name = name.split("/")
    fd = os.open(repo, os.O_RDONLY)
    for directory in directories:
        os.mkdir(directory, dir_fd=fd)
        child = os.open(directory, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    out = os.open(file_name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(out, content.encode())
    os.close(out)
    os.close(fd)


def _snapshot(base: Path, skip) -> dict:
    found = {}
    for current, dirs, names in os.walk(base):
        here = Path(current)
        dirs[:] = [d for d in dirs if not any(s == here / d for s in skip)]
        for name in names:
            path = here / name
            try:
                if path.is_symlink() or not path.is_file():
                    continue
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:  # past PATH_MAX: its name stands for it
                found[str(path)] = "unreadable"
    return found


def _left_behind(token: str) -> int:
    """The processes of a case still alive 15 s after it ended; they are then killed (by pid)."""
    deadline = time.monotonic() + 15
    left = processes_with(token)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = processes_with(token)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return len(left)


def _plain(name: str, case: Path, runner: Runner, files: dict, extra: list, expected: int, hostile) -> tuple:
    """One ``migrate run`` of a plain case: (Outcome, peak MB)."""
    repo, out, reports = case / "repo", case / "out", case / "reports"
    _write(repo, files)
    if "{link}" in extra:
        os.symlink(repo, case / "link")
    runner.mark()
    extra = [a.replace("{link}", str(case / "link")).replace("{repo}", str(repo)) for a in extra]
    command = [sys.executable, "-m", "npu_migrate.migrate", "run", str(repo), "--jobs", runner.jobs, "--no-cache"]
    if "--out" not in extra:
        command += ["--out", str(out)]
    if "--report-dir" not in extra:
        command += ["--report-dir", str(reports)]
    done = subprocess.run([sys.executable, "-c", _MEASURE, *command, *extra], capture_output=True, text=True, cwd=case,
                          env=runner.env)
    peak_line = done.stderr.rstrip().rsplit("\n", 1)[-1]
    peak = int(peak_line.split("=")[1]) / 1024 if peak_line.startswith("PEAK_KB=") else float("nan")
    stderr = done.stderr.rstrip().rsplit("\n", 1)[0] if peak_line.startswith("PEAK_KB=") else done.stderr
    runner.stderr.append(stderr)
    migrated = (out / "ok.py").is_file() and ".npu()" in (out / "ok.py").read_text()
    diagnostic = "-"
    if hostile and (reports / "report.json").is_file():
        entries = {f["path"]: f for f in json.loads((reports / "report.json").read_text())["files"]}
        entry = entries.get(hostile) or next((e for p, e in entries.items() if p.startswith(hostile)), None)
        diagnostic = (entry["error"] or entry["status"])[-70:] if entry else "(not in report)"
    elif not hostile:
        diagnostic = stderr.strip().splitlines()[-1][:70] if stderr.strip() else "-"
    wanted = EXPECTED_TEXT.get(name, {})
    texts_ok = all((out / rel).is_file() and (out / rel).read_bytes() == text for rel, text in wanted.items())
    if wanted:
        diagnostic = f"{diagnostic}; {len(wanted)} file(s) {'byte for byte as expected' if texts_ok else 'NOT as expected'}"
    if name == "dunder-import":
        report = json.loads((reports / "report.json").read_text())
        codes = {f["code"] for f in report["findings"] if f["path"] == "dyn.py"}
        texts_ok = {"NPU203", "NPU230"} <= codes
        diagnostic = f"codes {sorted(codes)}"
    return Outcome(done.returncode, expected, texts_ok, diagnostic, migrated or not hostile), peak


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="2")
    parser.add_argument("--keep", type=Path, help="build the cases here and keep them")
    parser.add_argument("--only", help="run only the cases whose name holds this")
    args = parser.parse_args(argv)
    base = (args.keep or Path(tempfile.mkdtemp(prefix="npu-migrate-hostile-"))).resolve()
    plain, bad, outside, left_total, accepted = _cases(), 0, 0, 0, 0
    names = [n for n in [*plain, *PROCEDURES] if not args.only or args.only in n]
    print(f"{'case':26} {'exit':>9} {'others migrated':>16} {'left':>5} {'peak MB':>8} {'wall s':>7}  detail")
    for name in names:
        case = base / name
        case.mkdir(parents=True)
        (case / "a-file").write_text("not a directory\n")
        skip = [case / d for d in ALLOWED] + ([case / "repo"] if name in IN_PLACE else [])
        runner = Runner(case, uuid.uuid4().hex, args.jobs, lambda: _snapshot(case, skip))
        start = time.perf_counter()
        peak = float("nan")
        if name in plain:
            outcome, peak = _plain(name, case, runner, *plain[name])
        else:
            outcome = PROCEDURES[name](case, runner)
        wall = time.perf_counter() - start
        before, after = runner.before or {}, _snapshot(case, skip)
        changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
        left = _left_behind(runner.token)
        traceback = any("Traceback" in e for e in runner.stderr)
        ok = outcome.code == outcome.expected and outcome.ok and not changed and not traceback and not left \
            and outcome.migrated is not False and not outcome.accepted
        bad += not ok
        outside += len(changed)
        left_total += left
        accepted += outcome.accepted
        migrated = "-" if outcome.migrated is None else ("yes" if outcome.migrated else "no")
        peak_text = "-" if peak != peak else f"{peak:.0f}"
        print(f"{name:26} {outcome.code:>4} ({outcome.expected:>3}) {migrated:>16} {left:>5} {peak_text:>8} {wall:>7.1f}  "
              f"{outcome.detail}{'' if ok else '   <-- UNEXPECTED'}"
              + (f"  [wrote outside: {changed[:2]}]" if changed else "") + ("  [traceback]" if traceback else ""),
              flush=True)
    print(f"{len(names)} cases, {bad} unexpected; {outside} writes outside --out/--report-dir; {left_total} processes "
          f"left behind; {accepted} cache entries accepted from another owner (peak MB: the largest max RSS among a "
          "plain case's processes)")
    if args.keep is None:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
