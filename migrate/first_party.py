"""isort's first-party module names for a tree (which imports are the user's own): the runner finds
them once per run and the engine reads them per file, so they sit below both."""

from __future__ import annotations

from typing import Dict, FrozenSet, Mapping, Sequence


def first_party_for(first_party: Mapping[str, FrozenSet[str]], path: str) -> FrozenSet[str]:
    """The module names isort counts as first party in the file at ``path`` (``first_party``: by directory)."""
    directory = path.rsplit("/", 1)[0] if "/" in path else ""
    return first_party.get(directory, frozenset()) | first_party.get("", frozenset())


def first_party_names(python: Sequence[str]) -> Dict[str, FrozenSet[str]]:
    """isort's first-party module names, by directory ("" for PATH): the modules and packages at the
    top of PATH (and of its ``src/``), and for each directory the modules beside its files (a script
    imports its siblings by name)."""
    names: Dict[str, set] = {}
    for path in python:
        parts = path.split("/")
        for depth in range(len(parts)):
            directory = "/".join(parts[:depth])
            name = parts[depth]
            if depth == len(parts) - 1:
                if not name.endswith(".py"):
                    break
                name = name[:-3]
            if name.isidentifier():
                names.setdefault(directory, set()).add(name)
    top = set(names.get("", ())) | set(names.get("src", ()))
    out = {directory: frozenset(found) for directory, found in names.items()}
    out[""] = frozenset(top)
    return out
