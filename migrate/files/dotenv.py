"""``.env`` files (``.env``, ``.env.*``, ``*.env``): ``NAME=value`` lines, optionally ``export``ed,
values optionally quoted, ``#`` comments; ``${NAME}`` references in values (docker compose and
python-dotenv expand them).
"""

from __future__ import annotations

import re

from npu_migrate.migrate.files.base import FileKind, Scan
from npu_migrate.migrate.files.environment import Launcher
from npu_migrate.migrate.files.shell import LAUNCHER_TRIGGERS

_LINE = re.compile(r"^[ \t]*(?:export[ \t]+)?(?P<name>[A-Za-z_][A-Za-z0-9_.]*)[ \t]*=[ \t]*(?P<value>.*?)[ \t]*$",
                   re.M)
_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def _value(raw: str):
    """The literal value (quotes and a trailing comment removed), None when it references others."""
    if raw and raw[0] in "'\"" and raw.count(raw[0]) >= 2:
        quoted = raw[1:raw.index(raw[0], 1)]
        return None if raw[0] == '"' and "$" in quoted else quoted
    raw = re.sub(r"[ \t]+#.*$", "", raw)
    return None if "$" in raw else raw


class DotEnv(FileKind):
    name = "dotenv"
    language = "bash"
    triggers = LAUNCHER_TRIGGERS

    def matches(self, path: str, head: bytes = b"") -> bool:
        name = path.rsplit("/", 1)[-1]
        return name == ".env" or name.startswith(".env.") or (name.endswith(".env") and len(name) > 4)

    def scan(self, scan: Scan) -> None:
        launcher = Launcher(scan)
        for match in _LINE.finditer(scan.text):
            if match.group("name").startswith("#"):
                continue
            raw = match.group("value")
            launcher.assign(match.group("name"), match.start("name"), _value(raw))
            if not raw.startswith("'"):
                for reference in _REFERENCE.finditer(raw):
                    launcher.refer(reference.group(1), match.start("value") + reference.start(1))
        launcher.finish()
