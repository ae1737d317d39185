"""A package declaration as every dependency file kind hands it to ``migrate.files.packages``: the
package, its version spec, where it is, and how a requirement could be added beside it.

``parse`` reads a PEP 508 requirement (``torch==2.4.0+cu121; sys_platform == "linux"``) with the
``packaging`` library; ``conda_spec`` reads a conda match spec (``pytorch=2.1.0=py3.10_cuda12.1_0``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from npu_migrate.migrate.files.base import TextEdit
from npu_migrate.opmap.packages import normalise

PIP, CONDA = "pip", "conda"


@dataclass(frozen=True)
class Declared:
    name: str  # normalised
    spec: str  # the declaration as written (stripped)
    at: int  # character offset of the declaration in the file
    group: str  # where in the file ("dependencies", "optional-dependencies.dev", "pip install", ...)
    pinned: Optional[str] = None  # the public version of an exact pin (== or ===, no wildcard)
    local: Optional[str] = None  # the local label of the pin (cu121) or a conda build string
    marker: Optional[str] = None  # its environment marker, as written
    ecosystem: str = PIP
    # Edits that add another requirement beside this one (None: this declaration cannot take one).
    sibling: Optional[Callable[[str], TextEdit]] = None
    hashed: bool = False  # pip's hash-checking mode: a requirement added without a hash would fail
    url: Optional[str] = None  # a direct reference (name @ https://...)
    extras: Tuple[str, ...] = ()  # name[extra, ...]


def parse(text: str) -> Optional[Requirement]:
    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def exact_pin(requirement: Requirement) -> tuple:
    """(public version, local label) of an exact pin, else (None, None)."""
    specs = list(requirement.specifier)
    if len(specs) != 1 or specs[0].operator not in ("==", "===") or specs[0].version.endswith(".*"):
        return None, None
    try:
        version = Version(specs[0].version)
    except InvalidVersion:
        return None, None
    return version.public, version.local


def declared(text: str, at: int, group: str, sibling=None, hashed: bool = False) -> Optional[Declared]:
    """A PEP 508 declaration, or None when ``text`` is not one (a path, a URL without a name, junk)."""
    requirement = parse(text)
    if requirement is None:
        return None
    pinned, local = exact_pin(requirement)
    marker = str(requirement.marker) if requirement.marker is not None else None
    return Declared(normalise(requirement.name), text.strip(), at, group, pinned, local, marker, PIP, sibling, hashed,
                    requirement.url, tuple(sorted(requirement.extras)))


_EGG = re.compile(r"[#&]egg=(?P<egg>[A-Za-z0-9_.-]+)")
_REPO = re.compile(r"/(?P<repo>[A-Za-z0-9_.-]+?)(\.git)?(@[^/#]*)?(#.*)?$")
# a wheel ({name}-{version}(-{build})?-{python}-{abi}-{platform}.whl) or a source archive ({name}-{version}.tar.gz)
_ARCHIVE = re.compile(r"(?:^|/)(?P<name>[A-Za-z0-9_.]+?)-(?P<version>[0-9][^-/]*?)(?:-[^/]*)?\.(?:whl|tar\.gz|zip)$")


def from_url(location: str, at: int, group: str) -> Optional[Declared]:
    """A requirement given as a URL (``git+https://github.com/org/repo.git@ref#egg=name``, a wheel URL)
    or as the path of a wheel or source archive (``flash_attn-2.7.4+cu12torch2.6-cp311-...whl``): its
    name from ``#egg=``, else the archive's or the repository's name; an archive's version is its pin
    (a ``+cu121`` label included)."""
    text = location.strip()
    archive = _ARCHIVE.search(text.split("#", 1)[0])
    if "://" not in text and archive is None:
        return None
    egg, repo = _EGG.search(text), _REPO.search(text)
    name = archive.group("name") if archive else egg.group("egg") if egg else repo.group("repo") if repo else None
    if not name:
        return None
    pinned = local = None
    if archive:
        try:
            version = Version(archive.group("version"))
            pinned, local = version.public, version.local
        except InvalidVersion:
            pass
    url = re.sub(r"^[a-z]+\+", "", text) if "://" in text else None
    return Declared(normalise(name), text, at, group, pinned, local, url=url)


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
ARCHIVES = (".whl", ".tar.gz", ".tgz", ".tar.bz2", ".tar", ".zip")


def requirement(text: str, at: int, group: str, sibling=None, hashed: bool = False) -> Optional[Declared]:
    """What pip reads in a requirement line or an install argument: a URL, a path (``./x``, ``/x``) or an
    archive file name is a location (``from_url``), anything else a PEP 508 requirement."""
    stripped = text.strip()
    if _SCHEME.match(stripped) or stripped.startswith((".", "/", "~")) or stripped.lower().endswith(ARCHIVES):
        return from_url(stripped, at, group)
    return declared(text, at, group, sibling, hashed)


_CONDA = re.compile(r"^(?:(?P<channel>[\w.-]+)::)?(?P<name>[A-Za-z0-9_.-]+)\s*(?P<rest>.*)$")


def conda_spec(text: str, at: int, group: str, sibling=None) -> Optional[Declared]:
    """A conda match spec: ``name``, ``name=1.2``, ``name=1.2=build``, ``name==1.2``, ``name>=1.2``."""
    match = _CONDA.match(text.strip())
    if match is None:
        return None
    rest = match.group("rest").replace(" ", "")
    pinned = local = None
    parts = re.match(r"^==?(?P<version>[\w.]+)(=(?P<build>[\w.*-]+))?$", rest)
    if parts and "*" not in parts.group("version"):
        pinned, local = parts.group("version"), parts.group("build")
    return Declared(normalise(match.group("name")), text.strip(), at, group, pinned, local, None, CONDA, sibling)


def line_end(text: str, offset: int) -> int:
    """The offset past the newline that ends the line holding ``offset`` (the text's end without one)."""
    end = text.find("\n", offset)
    return len(text) if end < 0 else end + 1


def list_sibling(text: str, start: int, end: int, quote: str) -> Callable[[str], TextEdit]:
    """Add a quoted string beside the list item at ``text[start:end]`` (a TOML array or a Python list):
    on a line of its own when the item has its line to itself and a comma after it, else right after it."""
    line_start = text.rfind("\n", 0, start) + 1
    after = text[end:line_end(text, end)]
    own_line = not text[line_start:start].strip() and re.match(r"^\s*,\s*(#.*)?\s*$", after)

    def quoted(requirement: str) -> str:
        mark = quote if quote not in requirement else ("'" if quote == '"' else '"')
        return f"{mark}{requirement}{mark}"

    if own_line:
        indent = text[line_start:start]
        stop = line_end(text, end)
        newline = "" if text[stop - 1:stop] == "\n" else "\n"
        return lambda requirement: TextEdit(stop, stop, f"{newline}{indent}{quoted(requirement)},\n")
    return lambda requirement: TextEdit(end, end, f", {quoted(requirement)}")
