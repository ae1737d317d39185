"""Reading shell commands (``migrate.files.shell_words``) into a ``Launcher``'s sites: variable
assignments (``NAME=value cmd``, ``export``/``declare -x``/``env``/``unset``) and references
(``$NAME``), ``nvidia-smi`` and how its output is used, GPU counts (``torchrun --nproc_per_node=gpu``,
Slurm's ``--gres=gpu``/``--gpus``), and the packages and indexes of ``pip install`` / ``conda
install`` commands. Shared by shell scripts, Slurm batch files, Dockerfile ``RUN`` lines and Makefile
recipes.
"""

from __future__ import annotations

import re
import shlex
from typing import List, Optional

from npu_migrate.migrate.files.base import TextEdit
from npu_migrate.migrate.files.declared import conda_spec, requirement
from npu_migrate.migrate.files.environment import Launcher
from npu_migrate.migrate.files.shell_words import ASSIGNMENT, Command, Shell, Word

KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "time", "{", "}", "case",
            "esac", "coproc", "exec", "nohup", "sudo", "command", "builtin", "eval"}
DECLARE = {"export", "declare", "typeset", "local", "readonly"}
NVIDIA_SMI = "nvidia-smi"
_NPROC = re.compile(r"^--nproc[-_]per[-_]node(=(?P<value>.*))?$")
_SLURM_GPU = re.compile(r"^(--gres=(\S*,)?gpu\b|--gpus(-per-[a-z]+)?(=|$)|-G\d*$|--gpus-per-node|--gpus-per-task|"
                        r"--mem-per-gpu|--cpus-per-gpu|--gpu-bind|--gpu-freq)")
_PIP_VALUE_OPTIONS = {"-e", "--editable", "-r", "--requirement", "-c", "--constraint", "-t", "--target", "--prefix", "--root", "--src",
                      "--upgrade-strategy", "--trusted-host", "--cache-dir", "--platform", "--python-version",
                      "--implementation", "--abi", "--progress-bar", "--log", "--config-settings", "-C",
                      "--global-option", "--no-binary", "--only-binary"}
_INDEX_OPTIONS = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links"}
_CONDA_VALUE_OPTIONS = {"-n", "--name", "-p", "--prefix", "--file"}
_SYSTEM_INSTALLERS = ("apt-get", "apt", "yum", "dnf", "apk", "zypper")


def _assignment(launcher: Launcher, word: Word) -> bool:
    match = ASSIGNMENT.match(word.raw)
    if not match:
        return False
    name = match.group(1)
    value = word.value[len(match.group(0)):] if word.value is not None else None
    launcher.assign(name, word.start, value, word.raw[len(match.group(0)):])
    return True


def read_shell(launcher: Launcher, shell: Shell, group: str = "shell") -> None:
    """Every site of ``shell``'s commands and expansions."""
    for expansion in shell.expansions:
        launcher.refer(expansion.name, expansion.start)
    counting = {c.pipeline for c in shell.commands if c.piped_in and _counts(c)}
    for command in shell.commands:
        _command(launcher, command, group, command.pipeline in counting)


def _counts(command: Command) -> bool:
    """``wc -l`` or ``grep -c``: the command counts the lines piped into it."""
    values = [w.value for w in command.words]
    return bool(values) and (values[0] == "wc" and "-l" in values or values[0] == "grep" and "-c" in values)


def _command(launcher: Launcher, command: Command, group: str, counted: bool = False) -> None:
    words = command.words
    k = 0
    while k < len(words) and words[k].value in KEYWORDS:
        k += 1
    while k < len(words) and _assignment(launcher, words[k]):
        k += 1
    if k >= len(words):
        return
    head = words[k].value
    if head in DECLARE:
        for word in words[k + 1:]:
            if not word.raw.startswith("-") and not _assignment(launcher, word) and ASSIGNMENT.match(word.raw + "="):
                launcher.refer(word.raw, word.start)
        return
    if head == "unset":
        for word in words[k + 1:]:
            if ASSIGNMENT.match(word.raw + "="):
                launcher.refer(word.raw, word.start)
        return
    if head == "env":
        k += 1
        while k < len(words) and (words[k].raw.startswith("-") or _assignment(launcher, words[k])):
            k += 1
        if k >= len(words):
            return
        head = words[k].value
    _tools(launcher, command, k, counted)
    _ci_environment(launcher, command, words[k:])
    _gpu_counts(launcher, words[k:])
    _installs(launcher, words[k:], group)


def _tools(launcher: Launcher, command: Command, k: int, counted: bool) -> None:
    """Every word of the command that names a tool of the environment table (``nvidia-smi``,
    ``nvcc``, ...); ``counted``: its output is piped into a line count (``| wc -l``)."""
    words = command.words
    for i, word in enumerate(words):
        name = word.value
        if not name or launcher.scan.table.environment("command", name) is None:
            continue
        args = [w.value or w.raw for w in words[i + 1:]]
        if name == NVIDIA_SMI and (command.captured or command.piped_out) \
                and (counted or any(a.startswith("--query-gpu=count") for a in args)):
            launcher.device_count("nvidia-smi", word.start, f"{NVIDIA_SMI} {' '.join(args)}".strip())
        elif command.captured or command.piped_out:
            launcher.command(name, word.start, word.end, False, "whose output is read by the script")
        elif command.argv:
            launcher.command(name, word.start, word.end, False, "as an argument of an exec-form (JSON) command")
        elif i != k:
            launcher.command(name, word.start, word.end, False, "run by another command")
        elif args:
            launcher.command(name, word.start, word.end, False, f"with options ({' '.join(args)})")
        else:
            launcher.command(name, word.start, word.end, True, "")


def _ci_environment(launcher: Launcher, command: Command, words: List[Word]) -> None:
    """``echo "NAME=value" >> $GITHUB_ENV``: a CI step setting NAME for the job's later steps (GitHub
    Actions' idiom) is an assignment of NAME, like ``export NAME=value``."""
    if words[0].value not in ("echo", "printf") or not any("GITHUB_ENV" in r.raw for r in command.redirects):
        return
    for word in words[1:]:
        quote = 1 if word.raw[:1] in "'\"" else 0
        match = ASSIGNMENT.match(word.raw[quote:])
        if match:
            value = word.value.partition("=")[2] if word.value is not None else None
            launcher.assign(match.group(1), word.start + quote, value)


def _gpu_counts(launcher: Launcher, words: List[Word]) -> None:
    for i, word in enumerate(words):
        text = word.value if word.value is not None else word.raw
        match = _NPROC.match(text)
        if match:
            value = match.group("value")
            if value is None and i + 1 < len(words):
                value = words[i + 1].value
            if value == "gpu":
                launcher.device_count("torchrun-gpu", word.start, text if match.group("value") else f"{text} gpu")
        elif words[0].value in ("srun", "salloc", "sbatch") and _SLURM_GPU.match(text):
            launcher.device_count("slurm-gpu", word.start, f"{words[0].value} {text}")


def slurm_directive(launcher: Launcher, line: str, at: int) -> None:
    """A ``#SBATCH`` line's options (``at``: the offset of the line)."""
    for match in re.finditer(r"\S+", line):
        if _SLURM_GPU.match(match.group()):
            launcher.device_count("slurm-gpu", at + match.start(), f"#SBATCH {match.group()}")


def _pip_start(words: List[Word]) -> Optional[int]:
    """The index of the first argument after ``pip install`` (any spelling), or None."""
    values = [w.value for w in words]
    for i, value in enumerate(values[:-1]):
        if value is None:
            continue
        if re.fullmatch(r"(.*/)?pip[0-9.]*", value) and values[i + 1] == "install":
            return i + 2
        if value in ("pip", "pip3") or re.fullmatch(r"(.*/)?python[0-9.]*", value):
            rest = values[i + 1:i + 4]
            if rest[:3] == ["-m", "pip", "install"]:
                return i + 4
    return None


def _installs(launcher: Launcher, words: List[Word], group: str) -> None:
    start = _pip_start(words)
    if start is not None:
        _pip(launcher, words[start:], f"pip install ({group})")
        return
    values = [w.value for w in words]
    if len(values) > 1 and values[0] in ("conda", "mamba", "micromamba") and values[1] in ("install", "create"):
        _conda(launcher, words[2:], f"conda install ({group})")
    elif len(values) > 1 and values[0] in _SYSTEM_INSTALLERS and "install" in values[1:3]:
        for word in words[values.index("install") + 1:]:
            if word.value and not word.value.startswith("-"):
                launcher.system_package(word.value, word.start, f"{values[0]} install ({group})")


def _pip(launcher: Launcher, args: List[Word], group: str) -> None:
    replaces_index = any(w.value in ("-i", "--index-url") or (w.value or "").startswith("--index-url=") for w in args)
    skip = False
    for i, word in enumerate(args):
        value = word.value
        if skip:
            skip = False
            continue
        if value is None:
            continue
        option, _, inline = value.partition("=")
        if option in _INDEX_OPTIONS:
            url = inline or (args[i + 1].value if i + 1 < len(args) else None)
            skip = not inline
            if url:
                launcher.index(url, word.start)
            continue
        if value.startswith("-"):
            skip = option in _PIP_VALUE_OPTIONS and not inline
            continue
        sibling = None if replaces_index else _after(word)
        launcher.package(requirement(value, word.start, group, sibling))


def _after(word: Word):
    """Add a requirement as the next argument of the command."""
    return lambda requirement: TextEdit(word.end, word.end, " " + shlex.quote(requirement))


def _conda(launcher: Launcher, args: List[Word], group: str) -> None:
    skip = False
    for i, word in enumerate(args):
        value = word.value
        if skip:
            skip = False
            continue
        if value is None:
            continue
        if value in ("-c", "--channel"):
            if i + 1 < len(args) and args[i + 1].value:
                launcher.index(args[i + 1].value, args[i + 1].start)
            skip = True
            continue
        if value.startswith("-"):
            skip = value in _CONDA_VALUE_OPTIONS
            continue
        launcher.package(conda_spec(value, word.start, group))
