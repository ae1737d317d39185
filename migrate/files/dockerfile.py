"""Dockerfiles (``Dockerfile``, ``Dockerfile.*``, ``Dockerfile-*``, ``*.Dockerfile``, ``Containerfile``): the base image
of every ``FROM`` (a CUDA image is reported with the CANN image plan; ``FROM ${BASE}`` is resolved
through the file's ``ARG`` defaults), ``ENV``/``ARG`` settings, and the shell commands of ``RUN``,
``CMD`` and ``ENTRYPOINT`` (exec-form JSON commands are read, never edited in place).
"""

from __future__ import annotations

import json
import re
from typing import Dict, Iterator, List, Tuple

from npu_migrate.migrate.files.base import FileKind, Scan
from npu_migrate.migrate.files.commands import read_shell
from npu_migrate.migrate.files.environment import Launcher
from npu_migrate.migrate.files.shell import LAUNCHER_TRIGGERS
from npu_migrate.migrate.files.shell_words import ASSIGNMENT, Command, Shell, Word, parse

_KEYWORD = re.compile(r"[ \t]*([A-Za-z]+)([ \t]+|$)")
_JSON_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
SHELL_INSTRUCTIONS = ("RUN", "CMD", "ENTRYPOINT")


def instructions(text: str) -> Iterator[Tuple[str, int, int]]:
    """(keyword, body start, body end) of each instruction. A line ending in a backslash continues
    it; comment and blank lines inside a continuation are skipped, as Docker does."""
    at, current = 0, None
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        stripped = body.strip()
        if current is None:
            match = _KEYWORD.match(body) if stripped and not stripped.startswith("#") else None
            if match:
                current = [match.group(1).upper(), at + match.end(), at + len(body)]
        elif stripped and not stripped.startswith("#"):
            current[2] = at + len(body)
        else:
            at += len(line)
            continue
        if current is not None and not body.rstrip().endswith("\\"):
            yield current[0], current[1], current[2]
            current = None
        at += len(line)
    if current is not None:
        yield current[0], current[1], current[2]


def _exec_form(text: str, start: int, end: int) -> Shell:
    """A JSON array command as one argv command."""
    words = []
    for match in _JSON_STRING.finditer(text, start, end):
        try:
            value = json.loads(match.group())
        except ValueError:
            value = None
        words.append(Word(match.start(), match.end(), match.group(), value))
    return Shell([Command(words, argv=True)], [])


def _words(text: str, start: int, end: int) -> List[Word]:
    return [w for command in parse(text, start, end).commands for w in command.words]


def _resolve(image: str, args: Dict[str, str]) -> str:
    return _REFERENCE.sub(lambda m: args.get(m.group(1), m.group(0)), image).replace("}", "") \
        if "$" in image else image


class Dockerfile(FileKind):
    name = "dockerfile"
    language = "dockerfile"
    triggers = LAUNCHER_TRIGGERS

    def matches(self, path: str, head: bytes = b"") -> bool:
        name = path.rsplit("/", 1)[-1]
        lower = name.lower()
        return lower in ("dockerfile", "containerfile") \
            or lower.startswith(("dockerfile.", "dockerfile-", "dockerfile_", "containerfile.")) \
            or lower.endswith((".dockerfile", ".containerfile"))

    def scan(self, scan: Scan) -> None:
        launcher = Launcher(scan)
        text = scan.text
        args: Dict[str, Tuple[str, int]] = {}  # ARG name -> (default, offset of the default)
        for keyword, start, end in instructions(text):
            if keyword == "FROM":
                self._from(launcher, text, start, end, args)
            elif keyword in ("ENV", "ARG"):
                self._settings(launcher, keyword, text, start, end, args)
            elif keyword in SHELL_INSTRUCTIONS:
                exec_form = text[start:end].lstrip().startswith("[")
                shell = _exec_form(text, start, end) if exec_form else parse(text, start, end)
                read_shell(launcher, shell, group=f"Dockerfile {keyword}")
            else:
                for expansion in parse(text, start, end).expansions:
                    launcher.refer(expansion.name, expansion.start)
        launcher.finish()

    def _from(self, launcher: Launcher, text: str, start: int, end: int, args: Dict[str, Tuple[str, int]]) -> None:
        """The base image; one given by an ARG is reported where the ARG names it."""
        words = [w for w in _words(text, start, end) if not w.raw.startswith("--")]
        if not words:
            return
        image = words[0].raw
        names = [m.group(1) for m in _REFERENCE.finditer(image)]
        resolved = _resolve(image, {name: value for name, (value, _) in args.items()})
        if len(names) == 1 and image.strip("${}") == names[0] and names[0] in args:
            line = launcher.scan.line(start)
            launcher.image(resolved, args[names[0]][1], f" (ARG {names[0]}, the base of FROM on line {line})")
        else:
            launcher.image(resolved, words[0].start, f" (from {image})" if resolved != image else "")
        for match in _REFERENCE.finditer(image):
            launcher.refer(match.group(1), words[0].start + match.start(1))

    def _settings(self, launcher: Launcher, keyword: str, text: str, start: int, end: int,
                  args: Dict[str, Tuple[str, int]]) -> None:
        shell = parse(text, start, end)
        words = [w for command in shell.commands for w in command.words]
        if keyword == "ENV" and words and "=" not in words[0].raw:  # legacy ENV NAME value
            value = text[words[1].start:end].strip() if len(words) > 1 else ""
            launcher.assign(words[0].raw, words[0].start, None if "$" in value else value.strip("\"'"))
            return
        for word in words:
            match = ASSIGNMENT.match(word.raw)
            if match:
                value = word.value[len(match.group(0)):] if word.value is not None else None
                launcher.assign(match.group(1), word.start, value)
                if keyword == "ARG" and value is not None:
                    args[match.group(1)] = (value, word.start + len(match.group(0)))
            elif keyword == "ARG" and ASSIGNMENT.match(word.raw + "="):
                launcher.assign(word.raw, word.start, None)
        for expansion in shell.expansions:
            launcher.refer(expansion.name, expansion.start)
