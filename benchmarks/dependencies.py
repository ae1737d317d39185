"""Dependency declarations and launchers of real repositories: what `migrate run` finds, rewrites and
reports per file kind, checked independently.

The corpus: source distributions of training/inference packages from PyPI (``pip download --no-deps
--no-binary :all:``, unpacked under SCRATCH/sdists, never copied into this repository) plus any
directory given with ``--extra DIR`` (each of its subdirectories is one repository; e.g. launcher
files saved from public GitHub repositories). Each repository is migrated as a user would
(``python -m npu_migrate.migrate run REPO --out ... --report-dir ...``).

Per file kind the table prints: files scanned, packages declared, launcher settings found (the
report's environment rows), findings rewritten / reported / suppressed, and the independent check:
every line of a scanned dependency or launcher file that mentions CUDA, cuDNN, NCCL or NVIDIA (any
spelling: a package name, a variable, a command, a URL, a ``+cu121`` label) is a *mention*; a
mention is *covered* when the report has a finding on that line, *comment* when it is in a ``#``
comment, else *uncovered* (printed one by one: a silent declaration, or data such as an ``echo``
text or a heredoc, which the tool leaves alone by design).

Exactness of the rewrites, checked on the migrated files: each changed file still parses in its
format (``bash -n`` for shell scripts, tomllib, YAML, Python, PEP 508 lines), undoing the
documented renames and removing the added torch-npu requirements gives back the original file byte
for byte, and migrating the migrated tree again changes nothing (a fixed point).

    flock /tmp/heavy.lock python benchmarks/dependencies.py [--extra /work/scratch/i26/repos]
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Tuple

import yaml

from npu_migrate.migrate.files.codes import DECLARATIONS

FILE_CODES = {d.code for d in DECLARATIONS}
SCRATCH = Path("/work/scratch/i26")
# packages whose source distribution pip can fetch without CUDA (flash-attn, xformers and vllm cannot
# be prepared without it; fairseq's build fails; torchtune publishes wheels only)
SDISTS = ["deepspeed", "axolotl", "unsloth", "open_clip_torch", "colossalai", "litgpt", "trl", "peft", "accelerate",
          "lightning"]
MENTION = re.compile(r"(?i)cuda|cudnn|nccl|nvidia|(?<![a-z])cu1[0-9]{1,2}(?![0-9])")
# the documented renames (opmap/environment.yaml), undone to check that nothing else changed
RENAMES = {"ASCEND_RT_VISIBLE_DEVICES": "CUDA_VISIBLE_DEVICES", "HCCL_SOCKET_IFNAME": "NCCL_SOCKET_IFNAME",
           "HCCL_SOCKET_FAMILY": "NCCL_SOCKET_FAMILY", "HCCL_RDMA_TIMEOUT": "NCCL_IB_TIMEOUT",
           "HCCL_RDMA_RETRY_CNT": "NCCL_IB_RETRY_CNT", "ASCEND_LAUNCH_BLOCKING": "CUDA_LAUNCH_BLOCKING",
           "PYTORCH_NPU_ALLOC_CONF": "PYTORCH_CUDA_ALLOC_CONF", "npu-smi info": "nvidia-smi"}
ADDED = [re.compile(p, re.M) for p in (
    r"^[ \t]*(- )?torch-npu==[^\n]*\n",  # a line of its own (requirements, setup.cfg, conda, a list item)
    r"""^[ \t]*["']torch-npu==[^"'\n]*["'],\n""",  # a list item on its own line (TOML, Python)
    r"""^torch-npu = "[^"\n]*"\n""",  # a Poetry dependency line
    r""", ["']torch-npu==[^"'\n]*["']""",  # an item added after another on its line
    r""" '?torch-npu==[^ '\n]*'?(?=[ \n])""")]  # an argument of pip install


def fetch_sdists(root: Path, names: List[str]) -> Dict[str, Path]:
    """name -> unpacked source tree (downloaded with pip when missing)."""
    root.mkdir(parents=True, exist_ok=True)
    found = {}
    for name in names:
        archive = next((p for p in root.glob("*") if p.is_file() and p.name.lower().replace("_", "-")
                        .startswith(name.lower().replace("_", "-") + "-") and p.suffix in (".gz", ".zip")), None)
        if archive is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", name,
                            "-d", str(root)], capture_output=True, text=True, timeout=600)
            archive = next((p for p in root.glob("*") if p.is_file() and p.name.lower().replace("_", "-")
                            .startswith(name.lower().replace("_", "-") + "-") and p.suffix in (".gz", ".zip")), None)
        if archive is None:
            print(f"{name}: no source distribution", file=sys.stderr)
            continue
        target = root / "unpacked" / archive.name.replace(".tar.gz", "").replace(".zip", "")
        if not target.is_dir():
            target.parent.mkdir(parents=True, exist_ok=True)
            if archive.suffix == ".zip":
                with zipfile.ZipFile(archive) as handle:
                    handle.extractall(target.parent)
            else:
                with tarfile.open(archive) as handle:
                    handle.extractall(target.parent, filter="data")
        found[name] = target
    return found


def migrate(source: Path, work: Path, *options: str) -> Tuple[Path, dict]:
    out, reports = work / "out" / source.name, work / "reports"
    done = subprocess.run([sys.executable, "-m", "npu_migrate.migrate", "run", str(source), "--out", str(out),
                           "--report-dir", str(reports), "--jobs", "2", "--no-cache", *options],
                          capture_output=True, text=True)
    report_path = reports / "report.json"
    if not report_path.is_file():
        raise RuntimeError(f"{source}: migrate run exited {done.returncode}: {done.stderr[-1500:]}")
    return out, json.loads(report_path.read_text())


def _comment_at(line: str, column: int) -> bool:
    """Whether ``line[column:]`` is inside a ``#`` comment (a # at the start or after whitespace)."""
    for match in re.finditer(r"(^|\s)#", line):
        if match.end() - 1 <= column:
            return True
    return False


def mentions(text: str, lines_with_findings: set, only: set = None) -> Counter:
    """``only``: the lines to look at (None: every line)."""
    counts: Counter = Counter()
    uncovered = []
    for number, line in enumerate(text.splitlines(), start=1):
        hits = list(MENTION.finditer(line))
        if not hits or (only is not None and number not in only):
            continue
        counts["mentions"] += 1
        if number in lines_with_findings:
            counts["covered"] += 1
        elif all(_comment_at(line, hit.start()) for hit in hits):
            counts["comment"] += 1
        else:
            counts["uncovered"] += 1
            uncovered.append((number, line.strip()[:140]))
    return counts, uncovered


def requirement_lines(text: str) -> set:
    """setup.py: the lines of the strings in its lists (or added to one) that parse as requirements
    (its other code is the Python rules' business); read with ast and packaging, not with
    npu-migrate's reader."""
    from packaging.requirements import InvalidRequirement, Requirement

    lines = set()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return lines
    listed = [element for node in ast.walk(tree) if isinstance(node, (ast.List, ast.Tuple, ast.Set))
              for element in node.elts]  # list items, and what .append()/.extend()/.add() adds
    listed += [arg for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr in ("append", "extend", "add") for arg in node.args]
    for node in listed:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and MENTION.search(node.value):
            try:
                Requirement(node.value)
            except InvalidRequirement:
                continue
            lines.add(node.lineno)
    return lines


def valid(kind: str, path: Path, text: str) -> str:
    """'' when the migrated text is valid in its format, else why not."""
    try:
        if kind in ("shell",) and path.suffix in (".sh", ".bash", ".slurm", ".sbatch", ""):
            done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
            return done.stderr.strip()
        if kind == "pyproject":
            import tomllib

            tomllib.loads(text)
        elif kind == "conda":
            yaml.safe_load(text)
        elif kind == "python":
            ast.parse(text)
        elif kind in ("requirements", "setup.cfg"):
            from packaging.requirements import Requirement

            for line in text.splitlines():
                if "torch-npu" in line:
                    Requirement(line.strip().split(" #")[0])
    except Exception as exc:  # noqa: BLE001 - any parser's error is the answer
        return str(exc)
    return ""


def undone(text: str) -> str:
    for pattern in ADDED:
        text = pattern.sub("", text)
    for new, old in RENAMES.items():
        text = text.replace(new, old)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extra", type=Path, action="append", default=[],
                        help="a directory whose subdirectories are repositories (e.g. saved launcher files)")
    parser.add_argument("--sdists", nargs="*", default=SDISTS, help="PyPI packages whose source to fetch")
    args = parser.parse_args()

    repos = fetch_sdists(SCRATCH / "sdists", args.sdists)
    for extra in args.extra:
        repos.update({p.name: p for p in sorted(Path(extra).iterdir()) if p.is_dir()})
    table: Dict[str, Counter] = defaultdict(Counter)
    uncovered_all: List[str] = []
    problems: List[str] = []
    with tempfile.TemporaryDirectory(prefix="npu-deps-") as tmp:
        for name, source in sorted(repos.items()):
            work = Path(tmp) / name
            out, report = migrate(source, work)
            kinds = {f["path"]: f["kind"] for f in report["files"]}
            lines: Dict[str, set] = defaultdict(set)
            python_rewrites = set()  # files the Python rules changed too (setup.py): their diff is not only ours
            for f in report["findings"]:
                lines[f["path"]].add(f["line"])
                if f["action"] == "rewritten" and f["code"] not in FILE_CODES:
                    python_rewrites.add(f["path"])
                kind = kinds.get(f["path"], "python")
                if kind != "python" or f["code"] in ("NPU130", "NPU131", "NPU132", "NPU136", "NPU220"):
                    table[kind][f["action"]] += 1
            for row in report["dependencies"]["packages"]:
                for d in row["declared"]:
                    table[kinds.get(d["path"], "python")]["packages"] += 1
            for row in report["dependencies"]["environment"]:
                table[kinds.get(row["path"], "python")]["settings"] += 1
            for entry in report["files"]:
                kind = entry["kind"]
                if kind == "python" and not entry["path"].endswith("setup.py"):
                    continue
                table[kind]["files"] += 1
                text = (source / entry["path"]).read_text(encoding="utf-8", errors="replace")
                only = requirement_lines(text) if kind == "python" else None
                counts, uncovered = mentions(text, lines[entry["path"]], only)
                table[kind].update(counts)
                uncovered_all += [f"{name}/{entry['path']}:{n}: {line}" for n, line in uncovered]
                if entry["status"] == "changed" and entry["path"] not in python_rewrites:
                    table[kind]["changed"] += 1
                    new = (out / entry["path"]).read_text(encoding="utf-8")
                    why = valid(kind, out / entry["path"], new)
                    if why:
                        problems.append(f"{name}/{entry['path']}: not valid after the rewrite: {why}")
                    if undone(new) != text:
                        problems.append(f"{name}/{entry['path']}: the rewrite changed more than its findings say")
                    else:
                        table[kind]["exact"] += 1
            # the fixed point: the migrated tree imports torch_npu already, so the fused rules can stay off
            _, again = migrate(out, work / "again", "--no-fused")
            changed_again = [f["path"] for f in again["files"] if f["status"] == "changed" and f["kind"] != "python"]
            if changed_again:
                problems.append(f"{name}: not a fixed point: {changed_again}")
            print(f"{name}: {len(report['files'])} files, {report['summary']['by_code']}", file=sys.stderr)

    columns = ["files", "packages", "settings", "rewritten", "reported", "suppressed", "changed", "exact", "mentions",
               "covered", "comment", "uncovered"]
    print(f"{len(repos)} repositories: {', '.join(sorted(repos))}\n")
    print("| kind | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    total: Counter = Counter()
    for kind in sorted(table):
        total.update(table[kind])
        print(f"| {kind} | " + " | ".join(str(table[kind][c]) for c in columns) + " |")
    print("| **all** | " + " | ".join(str(total[c]) for c in columns) + " |")
    print(f"\nuncovered mentions ({len(uncovered_all)}):")
    for line in uncovered_all:
        print("  " + line)
    print(f"\nproblems ({len(problems)}):")
    for line in problems:
        print("  " + line)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
