"""``[tool.npu-migrate]`` in pyproject.toml: the options a project keeps with its code.

The table is read from the ``pyproject.toml`` nearest to PATH (PATH's own directory, then each
parent) that has one, as ruff finds its settings; ``--isolated`` reads none. Keys:

- ``select``, ``ignore``: lists of codes or prefixes (``["NPU1"]``), as ``--select``/``--ignore``;
- ``exclude``: gitignore-style patterns of files not to migrate (copied unchanged);
- ``per-file-ignores``: ``{pattern: [codes]}``, codes ignored in the files a pattern matches;
- ``opmap``: extra op-table YAML files.

Patterns and op-table paths are relative to the directory of the pyproject.toml. Command-line
options win: ``--select`` replaces ``select``; ``--ignore``, ``--exclude`` and ``--opmap`` add to
the file's. A key the tool does not know, a value of the wrong type or a code that matches no
known code is an error naming ``file:line``, never silently ignored (a typo must not turn a gate
off).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:
    import pathspec  # imported where patterns are compiled: most runs have none

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FILE_NAME = "pyproject.toml"
TABLE = "npu-migrate"
KEYS = ("select", "ignore", "exclude", "per-file-ignores", "opmap")


class ConfigFileError(ValueError):
    """A ``[tool.npu-migrate]`` table that cannot be used; the message starts with ``file:line:``."""


@dataclass
class Config:
    path: Optional[Path] = None  # the pyproject.toml read (None: no file)
    select: Optional[List[str]] = None
    ignore: List[str] = field(default_factory=list)
    exclude: List[str] = field(default_factory=list)
    per_file_ignores: Dict[str, List[str]] = field(default_factory=dict)
    opmap: List[Path] = field(default_factory=list)

    @property
    def base(self) -> Optional[Path]:
        """The directory the file's patterns and paths are relative to."""
        return self.path.parent if self.path is not None else None


def find(start: Path) -> Optional[Path]:
    """The nearest pyproject.toml at or above ``start`` (a file's directory) with a ``[tool.npu-migrate]`` table."""
    start = Path(start).resolve()
    for directory in (start, *start.parents) if start.is_dir() else start.parents:
        candidate = directory / FILE_NAME
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                if _mentions_table(candidate):
                    return candidate  # broken, but ours: load() reports where
                continue
            if isinstance(data.get("tool"), dict) and TABLE in data["tool"]:
                return candidate
    return None


def _mentions_table(path: Path) -> bool:
    try:
        return f"tool.{TABLE}" in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def _line_of(lines: List[str], key: Optional[str]) -> int:
    """The 1-based line of ``key`` in the ``[tool.npu-migrate]`` table (or the table's header)."""
    header = re.compile(r"^\s*\[\s*tool\s*\.\s*(\"npu-migrate\"|npu-migrate)\s*(\.[^\]]*)?\]")
    inside, header_line = False, 1
    for number, line in enumerate(lines, start=1):
        if re.match(r"^\s*\[", line):
            inside = bool(header.match(line))
            if inside and header_line == 1:
                header_line = number
            if inside and key and re.search(rf"\.\s*\"?{re.escape(key)}\"?\s*\]", line):
                return number
            continue
        if inside and key and re.match(rf"^\s*\"?{re.escape(key)}\"?\s*=", line):
            return number
    return header_line


def load(path: Path, known_code: Callable[[str], bool]) -> Config:
    """The ``[tool.npu-migrate]`` table of ``path``; ``ConfigFileError`` names ``file:line`` of a problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"{path}: cannot be read: {getattr(exc, 'strerror', None) or exc}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"line (\d+)", str(exc))
        line = match.group(1) if match else (max(1, len(text.splitlines())) if "end of document" in str(exc) else 1)
        raise ConfigFileError(f"{path}:{line}: not valid TOML ({exc})") from exc
    table = data.get("tool", {}).get(TABLE, {}) if isinstance(data.get("tool"), dict) else {}
    lines = text.splitlines()

    def fail(key: Optional[str], problem: str) -> ConfigFileError:
        return ConfigFileError(f"{path}:{_line_of(lines, key)}: [tool.{TABLE}] {problem}")

    if not isinstance(table, dict):
        raise fail(None, "must be a table")
    config = Config(path=path.resolve())
    for key, value in table.items():
        if key not in KEYS:
            raise fail(key, f"unknown key {key!r} (known: {', '.join(KEYS)})")
        if key == "per-file-ignores":
            if not isinstance(value, dict):
                raise fail(key, "per-file-ignores must be a table of pattern = [codes]")
            for pattern, codes in value.items():
                config.per_file_ignores[pattern] = _codes(codes, f"per-file-ignores {pattern!r}", known_code,
                                                          lambda problem: fail(pattern, problem))
            continue
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise fail(key, f"{key} must be a list of strings")
        if key in ("select", "ignore"):
            setattr(config, key, _codes(value, key, known_code, lambda problem: fail(key, problem)))
        elif key == "exclude":
            config.exclude = list(value)
        else:
            config.opmap = [config.base / v for v in value]
            missing = [str(p) for p in config.opmap if not p.is_file()]
            if missing:
                raise fail(key, f"op-table file not found: {', '.join(missing)}")
    return config


def _codes(value, what: str, known_code: Callable[[str], bool], fail) -> List[str]:
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise fail(f"{what} must be a list of codes")
    codes = [v.strip().upper() for v in value if v.strip()]
    bad = [c for c in codes if not known_code(c)]
    if bad:
        raise fail(f"{what}: unknown diagnostic code{'s' if len(bad) > 1 else ''} {', '.join(map(repr, bad))} "
                   "(`migrate explain` lists the codes; prefixes such as NPU2 must match one)")
    return codes


# -- patterns ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Patterns:
    """Gitignore-style patterns, each list matched against paths relative to its own directory."""

    groups: Tuple[Tuple[Path, Tuple[str, ...], pathspec.GitIgnoreSpec], ...] = ()

    @staticmethod
    def of(*groups: Tuple[Optional[Path], Sequence[str]]) -> "Patterns":
        groups = tuple((base, p) for base, p in groups if base is not None and p)
        if not groups:
            return Patterns()
        import pathspec

        return Patterns(tuple((Path(base).resolve(), tuple(p), pathspec.GitIgnoreSpec.from_lines(p))
                              for base, p in groups))

    def match(self, path: Path) -> Optional[str]:
        """The first pattern that matches the absolute ``path``, or None."""
        for base, patterns, spec in self.groups:
            try:
                rel = Path(path).relative_to(base).as_posix()
            except ValueError:
                continue
            check = spec.check_file(rel)
            if check.include:
                return patterns[check.index] if check.index is not None else patterns[0]
        return None


def per_file_codes(config: Config) -> List[Tuple[pathspec.GitIgnoreSpec, Tuple[str, ...]]]:
    """``per-file-ignores`` as (compiled pattern, codes) pairs, for ``ignored_in``."""
    if not config.per_file_ignores:
        return []
    import pathspec

    return [(pathspec.GitIgnoreSpec.from_lines([pattern]), tuple(codes))
            for pattern, codes in config.per_file_ignores.items()]


def ignored_in(rules: List[Tuple[pathspec.GitIgnoreSpec, Tuple[str, ...]]], rel_to_base: Optional[str]) -> Tuple[str, ...]:
    """The codes ``per-file-ignores`` turns off in the file at ``rel_to_base`` (relative to the config's directory)."""
    if rel_to_base is None:
        return ()
    codes: List[str] = []
    for spec, extra in rules:
        if spec.match_file(rel_to_base):
            codes.extend(c for c in extra if c not in codes)
    return tuple(codes)
