"""``pyproject.toml``: PEP 621 ``[project] dependencies`` and ``optional-dependencies``, PEP 735
``[dependency-groups]``, ``[build-system] requires``, Poetry's ``[tool.poetry.dependencies]`` (and
its groups and dev-dependencies), PDM's ``[tool.pdm.dev-dependencies]``, and every package index
URL (Poetry/PDM sources, ``[[tool.uv.index]]``, ...). An exact torch pin gains its torch-npu
requirement beside it, in the same list (or on the next line of a Poetry table).
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional

from npu_migrate.migrate.files.base import FileKind, FileSyntaxError, Scan, TextEdit
from npu_migrate.migrate.files.declared import Declared, declared, line_end, list_sibling
from npu_migrate.migrate.files.packages import check_group, check_index, check_packages
from npu_migrate.migrate.files.toml_values import Entry, TomlArray, TomlString, TomlTable, entries

try:
    import tomllib
except ImportError:  # Python 3.10
    try:
        import tomli as tomllib
    except ImportError:  # the structure is read by toml_values alone
        tomllib = None

_POETRY_EXACT = re.compile(r"^(==)?\s*(?P<version>\d+(\.\d+)*)(\+(?P<local>[\w.]+))?$")


def _lists(entry: Entry):
    """(group, array) for each PEP 508 list this entry is."""
    table, key, value = entry.table, entry.key, entry.value
    full = table + key
    if full == ("project", "dependencies") and isinstance(value, TomlArray):
        yield "dependencies", value
    elif full[:2] == ("project", "optional-dependencies"):
        for name, array in _named_arrays(full[2:], value):
            yield f"optional-dependencies.{name}", array
    elif full[:1] == ("dependency-groups",):
        for name, array in _named_arrays(full[1:], value):
            yield f"dependency-groups.{name}", array
    elif full == ("build-system", "requires") and isinstance(value, TomlArray):
        yield "build-system", value
    elif full[:3] == ("tool", "pdm", "dev-dependencies"):
        for name, array in _named_arrays(full[3:], value):
            yield f"pdm.dev-dependencies.{name}", array


def _named_arrays(rest, value):
    if len(rest) == 1 and isinstance(value, TomlArray):
        yield rest[0], value
    elif not rest and isinstance(value, TomlTable):
        for name, array in value.items.items():
            if isinstance(array, TomlArray):
                yield name, array


def _poetry_group(entry: Entry) -> Optional[str]:
    full = entry.table + entry.key[:-1]
    if full == ("tool", "poetry", "dependencies"):
        return "poetry"
    if full == ("tool", "poetry", "dev-dependencies"):
        return "poetry.dev-dependencies"
    if len(full) == 5 and full[:3] == ("tool", "poetry", "group") and full[4] == "dependencies":
        return f"poetry.group.{full[3]}"
    return None


def _poetry(scan: Scan, entry: Entry, group: str) -> Optional[Declared]:
    name = entry.key[-1]
    if name == "python":
        return None
    value = entry.value
    spec, extra_keys = None, False
    if isinstance(value, TomlString):
        spec = value.value
    elif isinstance(value, TomlTable):
        version = value.items.get("version")
        spec = version.value if isinstance(version, TomlString) else None
        extra_keys = bool(set(value.items) - {"version", "source", "optional"})
        source = value.items.get("url") or value.items.get("git")
        if isinstance(source, TomlString):
            check_index(scan, source.value, source.start)
    pinned = local = None
    match = _POETRY_EXACT.match((spec or "").strip())
    if match:
        pinned, local = match.group("version"), match.group("local")
    end = line_end(scan.text, value.end)
    sibling = None if extra_keys or not isinstance(value, (TomlString, TomlTable)) else \
        (lambda requirement: TextEdit(end, end, _poetry_line(requirement)))
    item = declared(f"{name}=={pinned}{'+' + local if local else ''}" if pinned else name, entry.start, group, sibling)
    if item is None:
        return None
    text = f"{name} = {scan.text[value.start:value.end]}"
    return Declared(item.name, text, entry.start, group, pinned, local, None, item.ecosystem, sibling)


def _poetry_line(requirement: str) -> str:
    name, _, version = requirement.partition("==")
    return f'{name} = "{version}"\n'


def _uv_indexes(data: Optional[dict]) -> Dict[str, str]:
    """uv's named package indexes (``[[tool.uv.index]]``): name -> URL."""
    indexes = ((data or {}).get("tool", {}).get("uv", {}) or {}).get("index", [])
    return {i["name"]: i["url"] for i in indexes if isinstance(i, dict) and isinstance(i.get("name"), str)
            and isinstance(i.get("url"), str)} if isinstance(indexes, list) else {}


def _uv_source(scan: Scan, entry: Entry, indexes: Dict[str, str]) -> None:
    """``[tool.uv.sources] torch = [{ index = "pytorch-cu130", extra = "vllm" }]``: a package routed to a
    named index whose URL is a CUDA index is reported where the route names it."""
    full = entry.table + entry.key
    if len(full) != 4 or full[:3] != ("tool", "uv", "sources"):
        return
    routes = entry.value.items if isinstance(entry.value, TomlArray) else [entry.value]
    for route in routes:
        index = route.items.get("index") if isinstance(route, TomlTable) else None
        url = indexes.get(index.value) if isinstance(index, TomlString) else None
        record = scan.table.index(url) if url else None
        if record is not None:
            extra = route.items.get("extra")
            where = f" for the extra {extra.value!r}" if isinstance(extra, TomlString) else ""
            instead = f"; use {record.replacement}" if record.replacement else ""
            scan.report(index.start, record.code, f"{full[3]} comes from the package index {index.value!r} ({url})"
                                                  f"{where}: {record.reason}{instead}", record.fallback, api=url)


class Pyproject(FileKind):
    name = "pyproject"
    language = "toml"
    declares_packages = True

    def matches(self, path: str, head: bytes = b"") -> bool:
        name = path.rsplit("/", 1)[-1]
        return name.startswith("pyproject") and name.endswith(".toml")  # pyproject-<variant>.toml files too

    def problem(self, text: str, path: str = "") -> Optional[str]:
        if tomllib is None:
            return None
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            return f"not valid TOML: {exc}"
        return None

    def scan(self, scan: Scan) -> None:
        data = None
        if tomllib is not None:
            try:
                data = tomllib.loads(scan.text)
            except tomllib.TOMLDecodeError as exc:
                line = int(m.group(1)) if (m := re.search(r"line (\d+)", str(exc))) else 1
                raise FileSyntaxError(line, f"does not parse as TOML: {exc}") from None
        found: List[Declared] = []
        listed: List[str] = []
        for entry in entries(scan.text):
            full = entry.table + entry.key
            if len(full) == 3 and full[:2] in (("project", "optional-dependencies"), ("tool", "pdm", "dev-dependencies")) \
                    or len(full) == 2 and full[0] == "dependency-groups":
                check_group(scan, full[-1], entry.start)
            for group, array in _lists(entry):
                for item in array.items:
                    if isinstance(item, TomlString) and group == "dependencies":
                        listed.append(item.value)
                    if isinstance(item, TomlString):
                        one = declared(item.value, item.start, group, list_sibling(scan.text, item.start, item.end, item.quote))
                        if one is not None:
                            found.append(one)
            _uv_source(scan, entry, _uv_indexes(data))
            group = _poetry_group(entry)
            if group is not None:
                one = _poetry(scan, entry, group)
                if one is not None:
                    found.append(one)
            self._urls(scan, entry.value)
        if data is not None and listed != list(data.get("project", {}).get("dependencies", [])):
            raise RuntimeError("the TOML reader and tomllib disagree on [project] dependencies")
        check_packages(scan, found)

    def _urls(self, scan: Scan, value) -> None:
        if isinstance(value, TomlString) and re.match(r"^[a-z+]+://", value.value):
            check_index(scan, value.value, value.start)
        elif isinstance(value, TomlArray):
            for item in value.items:
                self._urls(scan, item)
        elif isinstance(value, TomlTable):
            for item in value.items.values():
                self._urls(scan, item)
