"""The hostile cases of ``hostile_inputs.py`` that take more than one run: forged cache entries,
kill -9 and SIGTERM at a known moment, two runs at once, an in-place run killed during its
analysis, parity runs with endless, forking or writing models (issue 25).

Each procedure gets its case directory and a ``Runner`` (which starts ``migrate`` processes with
the case's token in their environment, so the processes a case leaves behind can be found), and
returns an ``Outcome``. A process is only ever killed by its pid, and only one this case started.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

from npu_migrate.migrate.cache import VERSION

TOKEN_VARIABLE = "NPU_MIGRATE_HOSTILE_CASE"
OK = "import torch\n\nx = torch.zeros(3).cuda()\n"
# a file that keeps a worker busy for a minute or more (100,000 terms; --file-timeout 120)
SLOW = "import torch\nx = " + " + ".join(f"a{i}" for i in range(100_000)) + "\ny = x.cuda()\n"
INJECTED = "import os\nos.system('echo owned by another user')\n"


@dataclass
class Outcome:
    code: int  # the exit code the case is judged by
    expected: int
    ok: bool  # everything the case checks beyond the exit code held
    detail: str
    migrated: Optional[bool] = None  # the ordinary file was migrated (None: not part of the case)
    accepted: int = 0  # cache entries accepted from another owner (or forged)


class Runner:
    """Starts a case's ``migrate`` processes; the first start (or ``mark``) snapshots the case
    directory, so what the case built itself is not counted as written by a run."""

    def __init__(self, case: Path, token: str, jobs: str, snapshot: Callable[[], dict]) -> None:
        self.case, self.token, self.jobs, self.snapshot = case, token, jobs, snapshot
        self.env = dict(os.environ, **{TOKEN_VARIABLE: token}, TMPDIR=str(case / "tmp"))
        (case / "tmp").mkdir(exist_ok=True)
        self.stderr: List[str] = []
        self.logs: List[Path] = []
        self.before: Optional[dict] = None

    def mark(self) -> None:
        if self.before is None:
            self.before = self.snapshot()

    def start(self, *args, command: str = "run") -> subprocess.Popen:
        """A ``migrate`` process; its output goes to a log file (a pipe could be held open by a
        process it leaves behind), read back by ``finish``."""
        self.mark()
        extra = ["--jobs", self.jobs] if command == "run" else []
        log = self.case / "tmp" / f"run-{len(self.logs)}.log"
        self.logs.append(log)
        with open(log, "wb") as handle:
            process = subprocess.Popen([sys.executable, "-m", "npu_migrate.migrate", command, *map(str, args), *extra],
                                       cwd=self.case, env=self.env, stdout=handle, stderr=subprocess.STDOUT)
        process.log = log
        return process

    def finish(self, process: subprocess.Popen) -> str:
        """Wait for ``process``; its output (recorded for the traceback check)."""
        process.wait(900)
        text = process.log.read_text(errors="replace")
        self.stderr.append(text)
        return text

    def run(self, *args, command: str = "run") -> subprocess.CompletedProcess:
        process = self.start(*args, command=command)
        text = self.finish(process)
        return subprocess.CompletedProcess(process.args, process.returncode, "", text)


def processes_with(token: str) -> List[int]:
    """Pids (not zombies) whose environment carries ``token``: what a case started and left."""
    found = []
    needle = f"{TOKEN_VARIABLE}={token}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0] == b"Z":
                continue
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _wait_for_worker(runner: Runner, process: subprocess.Popen, seconds: float = 120.0) -> bool:
    """Wait until the run has a worker process busy (two processes carry the token)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        if len([p for p in processes_with(runner.token) if p != process.pid]) >= 1:
            time.sleep(1.0)  # the worker has its file
            return True
        time.sleep(0.1)
    return False


def _kill(process: subprocess.Popen, sig: int) -> int:
    if process.poll() is None:
        os.kill(process.pid, sig)
    process.wait(60)
    return process.returncode


def _repo(path: Path, files: Dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=h", "-c", "user.email=h@example.com", "-C", str(repo), *args],
                   check=True, capture_output=True)


# -- item 1: the cache --------------------------------------------------------------------------------
def _forged_cache(attack: str) -> Callable[[Path, Runner], Outcome]:
    def procedure(case: Path, runner: Runner) -> Outcome:
        repo, cache = _repo(case / "repo", {"ok.py": OK}), case / "cache"
        runner.run(repo, "--out", case / "warm-out", "--report-dir", case / "warm-reports", "--cache-dir", cache)
        entries = sorted((cache / f"v{VERSION}").rglob("*.json"))
        key = (cache / f"v{VERSION}" / "key").read_bytes()
        for entry in entries:
            _attack(entry, key, attack)
        done = runner.run(repo, "--out", case / "out", "--report-dir", case / "reports", "--cache-dir", cache)
        text = (case / "out" / "ok.py").read_text() if (case / "out" / "ok.py").is_file() else ""
        accepted = int(INJECTED in text)
        return Outcome(done.returncode, 0, bool(entries) and not accepted, f"{len(entries)} entries {attack}; "
                       f"{'ACCEPTED' if accepted else 'refused'}", ".npu()" in text, accepted)
    return procedure


def _attack(entry: Path, key: bytes, attack: str) -> None:
    import hmac

    body = json.loads(entry.read_text())
    body["result"]["migrated"], body["result"]["status"] = INJECTED, "changed"
    text = json.dumps(body["result"], sort_keys=True).encode()
    body["signature"] = hashlib.sha256(text).hexdigest() if attack == "plain-checksum" else \
        hmac.new(key, text, hashlib.sha256).hexdigest()  # what a thief of the key could sign
    entry.write_text(json.dumps(body))
    if attack == "other-owner":
        os.chown(entry, 65534, 65534) if os.geteuid() == 0 else entry.chmod(0o666)
    elif attack == "writable-by-others":
        entry.chmod(0o666)
    elif attack == "fifo":
        entry.unlink()
        os.mkfifo(entry)
    elif attack == "dev-zero":
        entry.unlink()
        entry.symlink_to("/dev/zero")


def cache_umask_000(case: Path, runner: Runner) -> Outcome:
    repo, cache = _repo(case / "repo", {"ok.py": OK}), case / "home-cache"
    cache.mkdir(mode=0o755)
    runner.env["NPU_MIGRATE_CACHE_DIR"] = str(cache / "npu-migrate")
    previous = os.umask(0)
    try:
        done = runner.run(repo, "--out", case / "out", "--report-dir", case / "reports")
    finally:
        os.umask(previous)
    made = [p for p in (cache / "npu-migrate").rglob("*")] + [cache / "npu-migrate"]
    loose = [str(p.relative_to(cache)) for p in made if (p.stat().st_mode & 0o777) != 0o700 and p.is_dir()
             or p.is_file() and p.stat().st_mode & 0o077]
    return Outcome(done.returncode, 0, not loose and len(made) > 2, f"{len(made)} cache paths made, "
                   f"{len(loose)} not private {loose[:2]}", (case / "out/ok.py").read_text().count(".npu()") == 1)


def cache_dir_in_path(case: Path, runner: Runner) -> Outcome:
    repo = _repo(case / "repo", {"ok.py": OK})
    done = runner.run(repo, "--out", case / "out", "--report-dir", case / "reports", "--cache-dir", repo / ".cache")
    return Outcome(done.returncode, 32, not (repo / ".cache").exists(), _last(done.stderr))


# -- item 2: workers end with the run -------------------------------------------------------------------
def _killed_during_analysis(sig: int, expected: int) -> Callable[[Path, Runner], Outcome]:
    def procedure(case: Path, runner: Runner) -> Outcome:
        repo = _repo(case / "repo", {"ok.py": OK, "poly.py": SLOW})
        process = runner.start(repo, "--out", case / "out", "--report-dir", case / "reports", "--no-cache",
                               "--file-timeout", "120")
        busy = _wait_for_worker(runner, process)
        _kill(process, sig)
        runner.finish(process)
        code = process.returncode
        return Outcome(code, expected, busy, f"{signal.Signals(sig).name} while a worker was busy" if busy
                       else "the run had no busy worker to kill")
    return procedure


# -- item 3: the journal names its run --------------------------------------------------------------------
def stale_journal(case: Path, runner: Runner) -> Outcome:
    repo, reports = _repo(case / "repo", {"ok.py": OK}), case / "reports"
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "init")
    first = runner.run(repo, "--in-place", "--report-dir", reports, "--no-cache")
    migrated = (repo / "ok.py").read_text()
    _repo(repo, {"poly.py": SLOW})
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "migrated; a new file")
    second = runner.start(repo, "--in-place", "--report-dir", reports, "--no-cache", "--file-timeout", "120")
    _wait_for_worker(runner, second)
    _kill(second, signal.SIGKILL)
    runner.finish(second)
    resume = runner.run(repo, "--in-place", "--resume", "--report-dir", reports)
    revert = runner.run(repo, "--in-place", "--revert", "--report-dir", reports)
    kept = (repo / "ok.py").read_text() == migrated and ".npu()" in migrated
    ok = first.returncode == 0 and resume.returncode == 32 == revert.returncode and kept \
        and "stopped before it wrote any file" in resume.stderr
    return Outcome(resume.returncode, 32, ok, f"resume {resume.returncode}, revert {revert.returncode}; the first "
                   f"run's file {'kept' if kept else 'UNDONE'}")


# -- item 4: one run per directory --------------------------------------------------------------------------
def two_runs_at_once(case: Path, runner: Runner) -> Outcome:
    repo = _repo(case / "repo", {"ok.py": OK, "poly.py": SLOW})
    out, reports = case / "out", case / "reports"
    first = runner.start(repo, "--out", out, "--report-dir", reports, "--no-cache", "--file-timeout", "120")
    _wait_for_worker(runner, first)
    second = runner.run(repo, "--out", out, "--report-dir", reports, "--no-cache", "--no-fused")
    named = f"pid {first.pid}, started" in second.stderr
    _kill(first, signal.SIGKILL)
    runner.finish(first)
    third = runner.run(repo, "--out", out, "--report-dir", reports, "--no-cache", "--file-timeout", "5")
    report = json.loads((reports / "report.json").read_text()) if (reports / "report.json").is_file() else {}
    clean = third.returncode == 16 and not report.get("written", {}).get("not_written") and \
        not [p for p in out.rglob("*") if "tmp" in p.name]
    return Outcome(second.returncode, 32, named and clean, f"second refused naming the holder: {named}; after the "
                   f"holder's kill -9 a third run: exit {third.returncode}", ".npu()" in (out / "ok.py").read_text())


# -- item 7: parity ------------------------------------------------------------------------------------------
MODEL = '''import os, subprocess, sys
import torch


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


def endless():
    if os.environ.get("MARKER"):
        open(os.environ["MARKER"], "w").write(str(os.getpid()))
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    while True:
        pass


def lingering_child():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], stdout=sys.stdout)
    return Tiny()


def writes_relative():
    open("written-by-the-model.txt", "w").write(os.getcwd())
    return Tiny()
'''


def _parity_trees(case: Path, cases: str) -> Path:
    for tree in ("tree", "tree-npu"):
        _repo(case / tree, {"model.py": MODEL})
    spec = case / "tree" / "parity.yaml"
    spec.write_text("cases:\n" + cases)
    return spec


def _temporary_dirs(case: Path) -> List[Path]:
    return sorted((case / "tmp").glob("migrate-parity-*"))


def _parity_case(cases: str, expected: int, verdict: Optional[str], *args: str,
                 most_seconds: float = 300.0) -> Callable[[Path, Runner], Outcome]:
    def procedure(case: Path, runner: Runner) -> Outcome:
        spec = _parity_trees(case, cases)
        start = time.perf_counter()
        done = runner.run("--spec", spec, "--json", case / "reports" / "parity.json", *args, command="parity")
        took = time.perf_counter() - start
        path = case / "reports" / "parity.json"
        verdicts = [c["verdict"] for c in json.loads(path.read_text())["cases"]] if path.is_file() else []
        ok = (verdict is None or verdict in verdicts) and not _temporary_dirs(case) and took < most_seconds
        return Outcome(done.returncode, expected, ok, f"verdicts {verdicts or _last(done.stderr)}; {took:.0f} s")
    return procedure


def parity_kill_9(case: Path, runner: Runner) -> Outcome:
    spec = _parity_trees(case, "  - {name: endless, factory: 'model.py:endless', inputs: {x: {shape: [2, 4]}}}\n")
    marker = case / "tmp" / "factory-started"
    runner.env["MARKER"] = str(marker)
    process = runner.start("--spec", spec, command="parity")
    deadline = time.monotonic() + 300
    while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    started = marker.exists()
    _kill(process, signal.SIGKILL)
    code = process.returncode
    runner.finish(process)
    time.sleep(3.0)  # the reaper's turn
    left = _temporary_dirs(case)
    return Outcome(code, -9, started and not left, f"factory spinning: {started}; temporary dirs left: {len(left)}")


def _last(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " ".join(lines[-1].split())[:90] if lines else "-"


INPUTS = "inputs: {x: {shape: [2, 4]}}"
PROCEDURES: Dict[str, Callable[[Path, Runner], Outcome]] = {
    "cache-other-owner": _forged_cache("other-owner"),
    "cache-writable-by-others": _forged_cache("writable-by-others"),
    "cache-plain-checksum": _forged_cache("plain-checksum"),
    "cache-entry-fifo": _forged_cache("fifo"),
    "cache-entry-dev-zero": _forged_cache("dev-zero"),
    "cache-umask-000": cache_umask_000,
    "cache-dir-in-path": cache_dir_in_path,
    "kill-9-during-analysis": _killed_during_analysis(signal.SIGKILL, -9),
    "sigterm-during-analysis": _killed_during_analysis(signal.SIGTERM, 130),
    "in-place-killed-resume": stale_journal,
    "two-runs-same-out": two_runs_at_once,
    "parity-endless-factory": _parity_case(
        f"  - {{name: endless, factory: 'model.py:endless', {INPUTS}, timeout: 5}}\n"
        f"  - {{name: fine, factory: 'model.py:writes_relative', {INPUTS}}}\n", 64, "timed out"),
    "parity-cli-timeout": _parity_case(f"  - {{name: endless, factory: 'model.py:endless', {INPUTS}}}\n", 64,
                                       "timed out", "--timeout", "5"),
    "parity-grandchild-stdout": _parity_case(f"  - {{name: forks, factory: 'model.py:lingering_child', {INPUTS}}}\n",
                                             0, "passed", most_seconds=120.0),
    "parity-input-too-large": _parity_case(
        "  - {name: huge, factory: 'model.py:writes_relative', inputs: {x: {shape: [100000, 100000]}}}\n", 32, None),
    "parity-kill-9": parity_kill_9,
}
