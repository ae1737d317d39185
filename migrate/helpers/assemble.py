"""The vendored helper as written into a migrated directory: the sections its migrated files call.

``helper_text(names)``: given the ``npu_glue.<name>`` attributes the files use (``used_names`` reads
them from migrated source), the module holding core and exactly the sections that define those
names, with what they need, in the sections' fixed order. Its first line is the ``Header``: the
npu-migrate version, the sections, and the sha256 of the text below it, so that a later run tells
an unedited copy (``unedited``) from one a user edited.

The module is the sections' docstrings as one docstring (ending with a line naming the sections
and the modules imported), their imports merged and sorted as isort sorts them (the standard
library, then torch and torch_npu), and their code, in order.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Set, Tuple

from .. import __version__
from . import HELPER
from .sections import Import, defining, sections, with_needs


@dataclass(frozen=True)
class Header:
    """The helper's first line: who wrote it, which sections, and the hash of the text below."""

    version: str
    sections: Tuple[str, ...]
    digest: str  # sha256 of the text below the header line, hex

    FORMAT = "# npu-migrate {version} vendored this {helper}.py: sections {sections}; sha256 of the text below: {digest}"

    def line(self) -> str:
        return self.FORMAT.format(helper=HELPER, version=self.version, sections=", ".join(self.sections),
                                  digest=self.digest)


_HEADER = re.compile(re.escape(Header.FORMAT).replace(re.escape("{helper}"), re.escape(HELPER))
                     .replace(re.escape("{version}"), r"(?P<version>\S+)")
                     .replace(re.escape("{sections}"), r"(?P<sections>\w+(?:, \w+)*)")
                     .replace(re.escape("{digest}"), r"(?P<digest>[0-9a-f]{64})") + r"\n")


def digest(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def split(text: str) -> Tuple[Optional[Header], str]:
    """(the header, the text below it), or (None, text) when the first line is no header."""
    match = _HEADER.match(text)
    if match is None:
        return None, text
    header = Header(match["version"], tuple(match["sections"].split(", ")), match["digest"])
    return header, text[match.end():]


def unedited(text: str) -> bool:
    """Whether ``text`` is a helper as this tool writes it: a header whose hash is the text's below it."""
    header, body = split(text)
    return header is not None and header.digest == digest(body)


def _import_lines(imports: Iterable[Import]) -> List[str]:
    """The imports as isort writes them: the standard library, a blank line, the rest; in each, the
    plain imports first, then the ``from`` imports, by module."""
    plain: Set[str] = set()
    names: Dict[str, Set[str]] = {}
    for module, name in imports:
        if name is None:
            plain.add(module)
        else:
            names.setdefault(module, set()).add(name)
    groups: List[List[str]] = [[], []]
    for module in sorted(plain):
        groups[_third_party(module)].append(f"import {module}")
    for module in sorted(names):
        groups[_third_party(module)].append(f"from {module} import {', '.join(sorted(names[module]))}")
    return [line for group in groups if group for line in [*group, ""]]


def _third_party(module: str) -> int:
    return int(module.split(".")[0] not in sys.stdlib_module_names)


def modules_imported(imports: Iterable[Import]) -> List[str]:
    """The top-level modules, torch and torch_npu first, then the standard library's by name."""
    tops = {module.split(".")[0] for module, _ in imports}
    return sorted(tops, key=lambda m: (not _third_party(m), m))


def assemble(wanted: Iterable[str]) -> str:
    """The helper holding the sections ``wanted`` and what they need (core always), header first."""
    chosen = [sections()[name] for name in with_needs(wanted)]
    imports = {item for section in chosen for item in section.imports}
    tops = modules_imported(imports)
    footer = (f"Sections: {', '.join(s.name for s in chosen)} (npu-migrate vendors those that the migrated files "
              f"beside this one call). Imports only {', '.join(tops[:-1])} and {tops[-1]}.")
    doc = "\n\n".join([*(s.doc for s in chosen), footer])
    body = "\n".join([f'"""{doc}\n"""', "", *_import_lines(imports), ""]) + "\n\n".join(s.body for s in chosen)
    header = Header(__version__, tuple(s.name for s in chosen), digest(body))
    return header.line() + "\n" + body


def helper_text(names: Iterable[str]) -> str:
    """The helper for files that use the attributes ``names`` of it (names no section defines select
    none: ``sections.unknown`` lists them)."""
    return assemble(defining(names))


_USE = re.compile(rf"(?<![\w.]){HELPER}\.([A-Za-z_]\w*)")


def used_names(migrated: str) -> Set[str]:
    """The ``npu_glue.<name>`` attributes a migrated file (Python source or a notebook's JSON) uses."""
    return set(_USE.findall(migrated))
