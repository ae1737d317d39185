"""Dependency declarations, launchers and configuration files of real repositories: what `migrate run`
finds, rewrites and reports per file kind, checked independently (issues 26 and 27).

The corpus: source distributions of training/inference projects from PyPI (``pip download --no-deps
--no-binary :all:``, unpacked under SCRATCH/sdists, never copied into this repository), plus any
directory given with ``--extra DIR`` (each subdirectory one repository). Each repository is migrated
as a user would (``python -m npu_migrate.migrate run REPO --out ... --report-dir ... --no-fused``: the
fused rules do not touch these files, and the device rules decide whether the code imports torch_npu).

Per file kind the table prints: files scanned, packages declared, settings found (the report's
environment rows), findings rewritten / reported / suppressed, files changed and how many of them
were exact, and the independent check, which shares nothing with npu-migrate's readers:

- *declarations*: each line holding a package name, package index, environment variable, command,
  image or configuration value that mentions CUDA, cuDNN, NCCL or NVIDIA (``sites``), found with
  ``tomllib``, ``configparser``, ``ast``/``packaging``, PyYAML's composer and regular expressions;
- *covered*: such a line with a finding; *silent*: without one (printed one by one: the target is 0);
- *text*: other lines that mention CUDA/NCCL/NVIDIA (prose in comments, ``echo`` text, paths and
  function names such as ``cuda13_env.sh``), which are data, not declarations.

Exactness, on every changed file: it still parses in its format (``bash -n``, tomllib, YAML, JSON,
Python, PEP 508); with the added torch-npu requirements taken out, the lines that differ from the
original are exactly the lines of the rewritten findings, and each such line is the original with
each finding's old text replaced by its target at the finding's column (nothing else changed); and
migrating the migrated tree again changes no dependency, launcher or config file (a fixed point).

    flock /tmp/heavy.lock python benchmarks/dependencies.py [--extra DIR]
"""

from __future__ import annotations

import argparse
import ast
import configparser
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import yaml

from npu_migrate.migrate.files.codes import DECLARATIONS

FILE_CODES = {d.code for d in DECLARATIONS}
SCRATCH = Path("/work/scratch/i26")
# training/inference projects whose source distribution pip fetches without CUDA (flash-attn, xformers,
# vllm, torchtune, fairseq and openrlhf cannot be fetched so: their builds need CUDA, or they ship wheels only)
SDISTS = ["deepspeed", "axolotl", "unsloth", "open_clip_torch", "colossalai", "litgpt", "trl", "peft", "accelerate",
          "lightning", "llamafactory", "ms-swift", "verl", "fschat", "xtuner"]
MENTION = re.compile(r"(?i)cuda|cudnn|nccl|nvidia|(?<![a-z])cu1[0-9]{1,2}(?![0-9])")
ENV_NAME = re.compile(r"\b[A-Z][A-Z0-9_]*(?:CUDA|CUDNN|NCCL|NVIDIA)[A-Z0-9_]*\b|\b(?:CUDA|CUDNN|NCCL|NVIDIA)_[A-Z0-9_]+\b"
                      r"|\b(?:CUDA|CUDNN|NCCL|NVIDIA)(?==)")
COMMANDS = re.compile(r"(?<![\w/.-])(nvidia-smi|nvcc|ncu|nsys|dcgmi)(?![\w.-])")
INSTALL = re.compile(r"\b(pip3?|conda|mamba|apt-get|apt|yum|dnf)\b.*\binstall\b")
WHOLE_VALUE = re.compile(r"(?i)cuda(:\d+)?|nccl|cpu:gloo,cuda:nccl|cuda:nccl,cpu:gloo|multi_gpu|nvidia")
ADDED = [re.compile(p, re.M) for p in (
    r"^[ \t]*(- )?torch-npu==[^\n]*\n",  # a line of its own (requirements, setup.cfg, conda, a list item)
    r"""^[ \t]*["']torch-npu==[^"'\n]*["'],\n""",  # a list item on its own line (TOML, Python)
    r"""^torch-npu = "[^"\n]*"\n""",  # a Poetry dependency line
    r""", ["']torch-npu==[^"'\n]*["']""",  # an item added after another on its line
    r""" '?torch-npu==[^ '\n]*'?(?=[ \n])""")]  # an argument of pip install


def fetch_sdists(root: Path, names: List[str]) -> Dict[str, Path]:
    """name -> unpacked source tree (downloaded with pip when missing)."""
    root.mkdir(parents=True, exist_ok=True)

    def archive_of(name: str) -> Optional[Path]:
        stem = name.lower().replace("_", "-") + "-"
        return next((p for p in sorted(root.glob("*")) if p.is_file() and p.suffix in (".gz", ".zip")
                     and p.name.lower().replace("_", "-").startswith(stem)), None)

    found = {}
    for name in names:
        if archive_of(name) is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", name,
                            "-d", str(root)], capture_output=True, text=True, timeout=600)
        archive = archive_of(name)
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
                           "--report-dir", str(reports), "--jobs", "2", "--no-cache", "--no-fused", *options],
                          capture_output=True, text=True)
    report_path = reports / "report.json"
    if not report_path.is_file():
        raise RuntimeError(f"{source}: migrate run exited {done.returncode}: {done.stderr[-1500:]}")
    return out, json.loads(report_path.read_text())


# -- the independent check: which lines declare something CUDA-specific -----------------------------
def _code(line: str) -> str:
    """A TOML/YAML/INI line without its ``#`` comment (a ``#`` inside quotes is kept)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" or char == ";" and not line[:i].strip():
            return line[:i]
    return line


def _lines_with(text: str, strings: Set[str]) -> Set[int]:
    """The lines of ``text`` on which one of ``strings`` (each mentioning CUDA) is written, outside comments."""
    lines = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if any(s in _code(line) for s in strings):
            lines.add(number)
    return lines


def _strings(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def pyproject_sites(text: str) -> Set[int]:
    data = tomllib.loads(text)
    project, tool = data.get("project", {}), data.get("tool", {})
    parts = [project.get("dependencies", []), project.get("optional-dependencies", {}),
             data.get("dependency-groups", {}), data.get("build-system", {}).get("requires", []),
             tool.get("poetry", {}).get("dependencies", {}), tool.get("poetry", {}).get("group", {}),
             tool.get("pdm", {}).get("dev-dependencies", {})]
    indexes = [*tool.get("uv", {}).get("index", []), *tool.get("poetry", {}).get("source", []),
               *tool.get("pdm", {}).get("source", [])]
    parts.append([i.get("url", "") for i in indexes if isinstance(i, dict)])  # an index is its URL (its name a label)
    found = {s for part in parts for s in _strings(part) if MENTION.search(s)}
    lines = _lines_with(text, found)
    routes = {s for s in _strings(tool.get("uv", {}).get("sources", {})) if MENTION.search(s)}
    for number, line in enumerate(text.splitlines(), start=1):  # a route names its index: index = "<name>"
        if any(re.search(r"\bindex\s*=\s*[\"']" + re.escape(name) + r"[\"']", _code(line)) for name in routes):
            lines.add(number)
    return lines


def setup_cfg_sites(text: str) -> Set[int]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    values = []
    if parser.has_section("options"):
        values += [parser.get("options", key) for key in ("install_requires", "setup_requires", "tests_require")
                   if parser.has_option("options", key)]
    if parser.has_section("options.extras_require"):
        values += [value for _, value in parser.items("options.extras_require")]
    found = {line.strip() for value in values for line in value.splitlines() if MENTION.search(line)}
    return _lines_with(text, found)


def conda_sites(text: str) -> Set[int]:
    data = yaml.safe_load(text) or {}
    found = {s for key in ("channels", "dependencies") for s in _strings(data.get(key, [])) if MENTION.search(s)}
    return _lines_with(text, found)


def setup_py_sites(text: str) -> Set[int]:
    """setup.py: the strings of its lists (or appended to one) that parse as requirements (its other code is
    the Python rules' business)."""
    from packaging.requirements import InvalidRequirement, Requirement

    lines = set()
    tree = ast.parse(text)
    listed = [e for node in ast.walk(tree) if isinstance(node, (ast.List, ast.Tuple, ast.Set)) for e in node.elts]
    listed += [a for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr in ("append", "extend", "add") for a in node.args]
    for node in listed:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and MENTION.search(node.value):
            try:
                Requirement(node.value)
            except InvalidRequirement:
                continue
            lines.add(node.lineno)
    return lines


def launcher_sites(text: str, dockerfile: bool = False) -> Set[int]:
    """Shell, Dockerfile, Makefile, .env: environment variables, GPU tools, base images and installed
    packages that mention CUDA/NCCL/NVIDIA, outside comments."""
    lines = set()
    for number, line in enumerate(text.splitlines(), start=1):
        code = re.sub(r"(^|\s)#.*$", "", line)
        if ENV_NAME.search(code) or COMMANDS.search(code) or (dockerfile and code.lstrip().upper().startswith("FROM ")
                                                             and MENTION.search(code)) \
                or (INSTALL.search(code) and MENTION.search(code)):
            lines.add(number)
    return lines


def config_sites(text: str, json_file: bool) -> Set[int]:
    """YAML/JSON: whole values naming CUDA/NCCL (a device, backend, MULTI_GPU, nvidia), accelerator gpu,
    environment variable names and references, CUDA images, GPU tools in command strings."""
    if json_file:  # JSON with comments: drop them for PyYAML (a JSON document is YAML)
        text = re.sub(r"(?m)^\s*//.*$|/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group()), text, flags=re.S)
    lines = set()
    for document in yaml.compose_all(text, Loader=yaml.SafeLoader):
        todo = [("", document)]
        while todo:
            key, node = todo.pop()
            if isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    name = getattr(k, "value", "")
                    if isinstance(name, str) and ENV_NAME.fullmatch(name):
                        lines.add(k.start_mark.line + 1)
                    todo.append((name if isinstance(name, str) else "", v))
            elif isinstance(node, yaml.SequenceNode):
                todo += [(key, item) for item in node.value]
            elif isinstance(node, yaml.ScalarNode):
                value, line = node.value, node.start_mark.line + 1
                if WHOLE_VALUE.fullmatch(value.strip()) or value == "gpu" and "accelerator" in key.lower() \
                        or key.lower() in ("image", "container") and MENTION.search(value):
                    lines.add(line)
                for offset, text_line in enumerate(value.splitlines()):  # names read or set inside strings
                    if ENV_NAME.search(text_line) and ("$" in text_line or "=" in text_line) \
                            or COMMANDS.search(text_line) or re.match(r"\s*[a-z][a-z0-9+.-]*://", text_line) \
                            and MENTION.search(text_line):
                        lines.add(line + offset + (1 if node.style in ("|", ">") else 0))
    return lines


def sites(kind: str, path: str, text: str) -> Set[int]:
    if kind == "requirements":
        return {n for n, line in enumerate(text.splitlines(), 1) if MENTION.search(re.sub(r"(^|\s)#.*$", "", line))}
    readers = {"pyproject": pyproject_sites, "setup.cfg": setup_cfg_sites, "conda": conda_sites,
               "python": setup_py_sites}
    if kind in readers:
        return readers[kind](text)
    if kind == "config":
        try:
            return config_sites(text, path.endswith(".json"))
        except yaml.YAMLError:
            if not path.endswith(".json"):
                raise
            plain = re.sub(r"(?m)^\s*//.*$|/\*.*?\*/|,(?=\s*[}\]])", "", text, flags=re.S)  # JSON with comments
            found = {s for s in _strings(json.loads(plain)) if WHOLE_VALUE.fullmatch(s) or ENV_NAME.fullmatch(s)}
            return _lines_with(text, {json.dumps(s) for s in found})
    return launcher_sites(text, kind == "dockerfile")


def text_mentions(text: str, declared: Set[int], found: Set[int]) -> int:
    """Lines that mention CUDA/NCCL/NVIDIA but declare nothing and have no finding (prose, data, names)."""
    return sum(1 for n, line in enumerate(text.splitlines(), 1)
               if n not in declared and n not in found and MENTION.search(line))


# -- exactness of the rewrites ---------------------------------------------------------------------
def valid(kind: str, path: Path, text: str) -> str:
    """'' when the migrated text is valid in its format, else why not."""
    try:
        if kind == "shell" and path.suffix in (".sh", ".bash", ".slurm", ".sbatch", ""):
            return subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True).stderr.strip()
        if kind == "pyproject":
            tomllib.loads(text)
        elif kind == "conda" or kind == "config" and not path.name.endswith(".json"):
            list(yaml.safe_load_all(text))
        elif kind == "config":
            json.loads(re.sub(r"(?m)^\s*//.*$|/\*.*?\*/|,(?=\s*[}\]])", "", text, flags=re.S))
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


def _old_new(finding: dict) -> Tuple[str, str]:
    if finding["code"] == "NPU224":  # "<key path>: <old> → <new>"
        message = finding["message"]
        return message[len(finding["api"]) + 2:message.rindex(" → ")], finding["target"]
    return finding["api"], finding["target"]


def exactness(original: str, migrated: str, findings: List[dict]) -> str:
    """'' when the migrated text is the original with the findings' edits and nothing else."""
    for pattern in ADDED:
        migrated = pattern.sub("", migrated)
    old_lines, new_lines = original.split("\n"), migrated.split("\n")
    if len(old_lines) != len(new_lines):
        return f"{len(new_lines) - len(old_lines)} lines added or removed besides torch-npu requirements"
    by_line: Dict[int, List[dict]] = defaultdict(list)
    for f in findings:
        if f["action"] == "rewritten" and f["code"] != "NPU220":
            by_line[f["line"]].append(f)
    for number, (old, new) in enumerate(zip(old_lines, new_lines), start=1):
        expected = old
        for f in sorted(by_line.get(number, []), key=lambda f: -f["col"]):
            before, after = _old_new(f)
            at = f["col"] - 1
            if expected[at:at + len(before)] != before:
                return f"line {number}: the finding at column {f['col']} does not point at {before!r}"
            expected = expected[:at] + after + expected[at + len(before):]
        if expected != new:
            return f"line {number}: {old!r} became {new!r}, the findings say {expected!r}"
    return ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extra", type=Path, action="append", default=[],
                        help="a directory whose subdirectories are repositories")
    parser.add_argument("--sdists", nargs="*", default=SDISTS, help="PyPI projects whose source to fetch")
    args = parser.parse_args()

    repos = fetch_sdists(SCRATCH / "sdists", args.sdists)
    for extra in args.extra:
        repos.update({p.name: p for p in sorted(Path(extra).iterdir()) if p.is_dir()})
    table: Dict[str, Counter] = defaultdict(Counter)
    silent: List[str] = []
    problems: List[str] = []
    with tempfile.TemporaryDirectory(prefix="npu-deps-") as tmp:
        for name, source in sorted(repos.items()):
            work = Path(tmp) / name
            out, report = migrate(source, work)
            kinds = {f["path"]: f["kind"] for f in report["files"]}
            findings: Dict[str, List[dict]] = defaultdict(list)
            for f in report["findings"]:
                findings[f["path"]].append(f)
                kind = kinds.get(f["path"], "python")
                if kind != "python" or f["code"] in FILE_CODES:
                    table[kind][f["action"]] += 1
            for row in report["dependencies"]["packages"]:
                for d in row["declared"]:
                    table[kinds.get(d["path"], "python")]["packages"] += 1
            for row in report["dependencies"]["environment"]:
                table[kinds.get(row["path"], "python")]["settings"] += 1
            for entry in report["files"]:
                kind, path = entry["kind"], entry["path"]
                if kind == "python" and not path.endswith("setup.py"):
                    continue
                if entry["status"] == "error":
                    table[kind]["errors"] += 1
                    problems.append(f"{name}/{path}: {entry['error']}")
                    continue
                table[kind]["files"] += 1
                text = (source / path).read_text(encoding="utf-8", errors="replace")
                try:
                    declared = sites(kind, path, text)
                except Exception as exc:  # noqa: BLE001 - a file the independent readers cannot read
                    declared = set()
                    table[kind]["unreadable"] += 1
                    if not any(f["code"] == "NPU139" for f in findings[path]):
                        problems.append(f"{name}/{path}: the independent check cannot read it ({exc}) "
                                        "and it has no NPU139 finding")
                lines = {f["line"] for f in findings[path]}
                table[kind]["declarations"] += len(declared)
                table[kind]["covered"] += len(declared & lines)
                table[kind]["silent"] += len(declared - lines)
                table[kind]["text"] += text_mentions(text, declared, lines)
                source_lines = text.splitlines()
                silent += [f"{name}/{path}:{n}: {source_lines[n - 1].strip()[:140]}" for n in sorted(declared - lines)]
                ours = [f for f in findings[path] if f["code"] in FILE_CODES]
                python_rewrites = [f for f in findings[path] if f["action"] == "rewritten" and f["code"] not in FILE_CODES]
                if entry["status"] == "changed" and not python_rewrites:
                    table[kind]["changed"] += 1
                    new = (out / path).read_text(encoding="utf-8")
                    why = valid(kind, out / path, new) or exactness(text, new, ours)
                    if why:
                        problems.append(f"{name}/{path}: {why}")
                    else:
                        table[kind]["exact"] += 1
            _, again = migrate(out, work / "again")
            changed_again = [f["path"] for f in again["files"] if f["status"] == "changed" and f["kind"] != "python"]
            if changed_again:
                problems.append(f"{name}: not a fixed point: {changed_again}")
            codes = {c: n for c, n in report["summary"]["by_code"].items() if c in FILE_CODES}
            print(f"{name}: {len(report['files'])} files scanned, {codes}", file=sys.stderr)

    columns = ["files", "packages", "settings", "rewritten", "reported", "suppressed", "changed", "exact",
               "declarations", "covered", "silent", "text"]
    print(f"{len(repos)} repositories: {', '.join(sorted(repos))}\n")
    print("| kind | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    total: Counter = Counter()
    for kind in sorted(table):
        total.update(table[kind])
        print(f"| {kind} | " + " | ".join(str(table[kind][c]) for c in columns) + " |")
    print("| **all** | " + " | ".join(str(total[c]) for c in columns) + " |")
    print(f"\nsilent declarations ({len(silent)}):")
    for line in silent:
        print("  " + line)
    print(f"\nproblems ({len(problems)}):")
    for line in problems:
        print("  " + line)
    return 1 if problems or silent else 0


if __name__ == "__main__":
    raise SystemExit(main())
