"""``setup.cfg``: ``[options] install_requires`` / ``setup_requires`` / ``tests_require`` and each
``[options.extras_require]`` key. A value is a list with one requirement a line (indented
continuation lines), or one line; an exact torch pin in a one-a-line list gains its torch-npu line
right below it, with the same indentation.
"""

from __future__ import annotations

import re
from typing import List

from npu_migrate.migrate.files.base import FileKind, Scan, TextEdit
from npu_migrate.migrate.files.declared import Declared, declared, line_end
from npu_migrate.migrate.files.packages import check_packages

_SECTION = re.compile(r"^\[(?P<name>[^\]]+)\]")
_KEY = re.compile(r"^(?P<key>[A-Za-z0-9_.-]+)[ \t]*[=:][ \t]*(?P<value>.*)$")
_LISTS = {"install_requires": "install_requires", "setup_requires": "build-system", "tests_require": "tests_require"}


def _sibling(text: str, at: int):
    stop = line_end(text, at)
    indent = text[text.rfind("\n", 0, at) + 1:at]
    newline = "" if text[stop - 1:stop] == "\n" else "\n"
    return lambda requirement: TextEdit(stop, stop, f"{newline}{indent}{requirement}\n")


class SetupCfg(FileKind):
    name = "setup.cfg"
    language = "ini"
    declares_packages = True

    def matches(self, path: str, head: bytes = b"") -> bool:
        return path.rsplit("/", 1)[-1] == "setup.cfg"

    def scan(self, scan: Scan) -> None:
        found: List[Declared] = []
        section, group, at = "", None, 0
        for line in scan.text.splitlines(keepends=True):
            body = line.rstrip("\r\n")
            stripped = body.strip()
            start = at
            at += len(line)
            if not stripped or stripped.startswith(("#", ";")):
                continue
            if body[0] in " \t":  # a continuation line of the current key (body is not blank here)
                if group is not None:
                    offset = start + len(body) - len(body.lstrip())
                    self._one(scan, stripped, offset, group, found, _sibling(scan.text, offset))
                continue
            match = _SECTION.match(body)
            if match:
                section, group = match.group("name").strip(), None
                continue
            match = _KEY.match(body)
            group = None
            if not match:
                continue
            key = match.group("key")
            if section == "options" and key in _LISTS:
                group = _LISTS[key]
            elif section == "options.extras_require":
                group = f"extras_require.{key}"
            if group is not None and match.group("value").strip():
                value = match.group("value").strip()
                offset = start + match.start("value")
                parts = [value] if declared(value, offset, group) else value.split(";")
                for part in parts:
                    if part.strip():
                        self._one(scan, part.strip(), offset + value.find(part.strip()), group, found, None)
        check_packages(scan, found)

    @staticmethod
    def _one(scan: Scan, text: str, at: int, group: str, found: List[Declared], sibling) -> None:
        item = declared(text, at, group, sibling)
        if item is not None:
            found.append(item)
