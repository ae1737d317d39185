"""Makefiles (``Makefile``, ``makefile``, ``GNUmakefile``, ``*.mk``): variable assignments
(``NAME = value``, ``:=``, ``?=``, ``+=``, ``export NAME=value``), make references ``$(NAME)`` /
``${NAME}``, and each recipe line (a line starting with a tab) as shell commands, where ``$$`` is
the shell's ``$``.
"""

from __future__ import annotations

import re

from npu_migrate.migrate.files.base import FileKind, Scan
from npu_migrate.migrate.files.commands import read_shell
from npu_migrate.migrate.files.environment import Launcher
from npu_migrate.migrate.files.shell import LAUNCHER_TRIGGERS
from npu_migrate.migrate.files.shell_words import Shell, parse

_ASSIGN = re.compile(r"^[ \t]*(?:(?:export|override)[ \t]+)*(?P<name>[A-Za-z_][A-Za-z0-9_]*)[ \t]*"
                     r"(?::{1,3}=|\?=|\+=|!=|=)[ \t]*(?P<value>.*?)[ \t]*$")
_EXPORT = re.compile(r"^[ \t]*(?:export|unexport)[ \t]+(?P<names>[A-Za-z_][A-Za-z0-9_ \t]*)$")


def _lines(text: str):
    """(start, end, is_recipe) of each logical line (a trailing backslash joins the next)."""
    at, start, recipe, open_ = 0, 0, False, False
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if not open_:
            start, recipe = at, line.startswith("\t")
        open_ = body.endswith("\\")
        if not open_:
            yield start, at + len(body), recipe
        at += len(line)
    if open_:
        yield start, at, recipe


class Makefile(FileKind):
    name = "makefile"
    language = "makefile"
    triggers = LAUNCHER_TRIGGERS

    def matches(self, path: str, head: bytes = b"") -> bool:
        name = path.rsplit("/", 1)[-1]
        return name in ("Makefile", "makefile", "GNUmakefile") or name.endswith(".mk")

    def scan(self, scan: Scan) -> None:
        launcher = Launcher(scan)
        text = scan.text
        for start, end, recipe in _lines(text):
            line = text[start:end]
            if recipe:
                read_shell(launcher, parse(text, start, end, make=True), group="Makefile recipe")
                continue
            code = re.sub(r"(^|[ \t])#.*$", "", line)
            if not code.strip():
                continue
            shell = parse(text, start, start + len(code), make=True)
            # make variable references, and the commands of $(shell ...) functions
            read_shell(launcher, Shell([c for c in shell.commands if c.captured], [e for e in shell.expansions if e.make]),
                       group="Makefile")
            match = _ASSIGN.match(code)
            if match:
                value = match.group("value")
                launcher.assign(match.group("name"), start + match.start("name"), None if "$" in value else value)
                continue
            match = _EXPORT.match(code)
            if match:
                for name in re.finditer(r"\S+", match.group("names")):
                    launcher.refer(name.group(), start + match.start("names") + name.start())
        launcher.finish()
