"""The key/value pairs of a TOML file with the offsets of their values (``tomllib`` has none): enough
of TOML to find dependency lists and their strings in pyproject.toml. ``entries`` raises
``FileSyntaxError`` where it cannot read the file; the caller checks the file with ``tomllib`` too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Dict, List, Tuple, Union

from npu_migrate.migrate.files.base import FileSyntaxError

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SCALAR = re.compile(r"[^,\]\}\s#]+")


@dataclass
class TomlString:
    value: str
    start: int  # offsets of the string token, quotes included
    end: int
    quote: str  # '"' or "'"


@dataclass
class TomlArray:
    items: list
    start: int  # offset of "[" and past "]"
    end: int


@dataclass
class TomlTable:
    items: Dict[str, "Value"]
    start: int
    end: int


@dataclass
class TomlOther:
    raw: str
    start: int
    end: int


Value = Union[TomlString, TomlArray, TomlTable, TomlOther]


@dataclass
class Entry:
    table: Tuple[str, ...]  # the [table] (or [[array]]) it is in
    key: Tuple[str, ...]  # its dotted key
    value: Value
    start: int  # offset of the key


class _Reader:
    def __init__(self, text: str) -> None:
        self.text, self.i = text, 0

    def error(self, message: str) -> FileSyntaxError:
        return FileSyntaxError(self.text.count("\n", 0, self.i) + 1, f"does not parse as TOML: {message}")

    def skip(self, newlines: bool) -> None:
        t = self.text
        while self.i < len(t):
            c = t[self.i]
            if c in " \t\r" or (newlines and c == "\n"):
                self.i += 1
            elif c == "#":
                end = t.find("\n", self.i)
                self.i = len(t) if end < 0 else end
            else:
                return

    def string(self) -> TomlString:
        t, start = self.text, self.i
        for quote in ('"""', "'''"):
            if t.startswith(quote, start):
                end = t.find(quote, start + 3)
                if end < 0:
                    raise self.error("unterminated multi-line string")
                while t.startswith(quote[0], end + 3):  # up to two quotes may end the content
                    end += 1
                self.i = end + 3
                body = t[start + 3:end].removeprefix("\n")
                return TomlString(body, start, self.i, quote[0])
        quote = t[start]
        j = start + 1
        while j < len(t) and t[j] != quote and t[j] != "\n":
            j += 2 if quote == '"' and t[j] == "\\" else 1
        if j >= len(t) or t[j] != quote:
            raise self.error("unterminated string")
        self.i = j + 1
        raw = t[start:self.i]
        try:
            value = json.loads(raw) if quote == '"' else raw[1:-1]
        except ValueError:  # a TOML escape JSON lacks (\U0001F600, \e): the text between the quotes
            value = raw[1:-1]
        return TomlString(value, start, self.i, quote)

    def key(self) -> Tuple[str, ...]:
        parts = []
        while True:
            self.skip(False)
            if self.i < len(self.text) and self.text[self.i] in "\"'":
                parts.append(self.string().value)
            else:
                match = _BARE_KEY.match(self.text, self.i)
                if not match:
                    raise self.error("a key was expected")
                parts.append(match.group())
                self.i = match.end()
            self.skip(False)
            if not self.text.startswith(".", self.i):
                return tuple(parts)
            self.i += 1

    def value(self) -> Value:
        self.skip(False)
        t, start = self.text, self.i
        if start >= len(t):
            raise self.error("a value was expected")
        if t[start] in "\"'":
            return self.string()
        if t[start] == "[":
            self.i += 1
            items = []
            while True:
                self.skip(True)
                if self.text.startswith("]", self.i):
                    self.i += 1
                    return TomlArray(items, start, self.i)
                items.append(self.value())
                self.skip(True)
                if self.text.startswith(",", self.i):
                    self.i += 1
                elif not self.text.startswith("]", self.i):
                    raise self.error("',' or ']' was expected in an array")
        if t[start] == "{":
            self.i += 1
            table: Dict[str, Value] = {}
            while True:
                self.skip(False)
                if self.text.startswith("}", self.i):
                    self.i += 1
                    return TomlTable(table, start, self.i)
                key = self.key()
                if not self.text.startswith("=", self.i):
                    raise self.error("'=' was expected in an inline table")
                self.i += 1
                table[".".join(key)] = self.value()
                self.skip(False)
                if self.text.startswith(",", self.i):
                    self.i += 1
        match = _SCALAR.match(t, start)
        if not match:
            raise self.error("a value was expected")
        self.i = match.end()
        return TomlOther(match.group(), start, self.i)


def entries(text: str) -> List[Entry]:
    reader = _Reader(text)
    table: Tuple[str, ...] = ()
    found = []
    while True:
        reader.skip(True)
        if reader.i >= len(text):
            return found
        if text.startswith("[", reader.i):
            double = text.startswith("[[", reader.i)
            reader.i += 2 if double else 1
            table = reader.key()
            closer = "]]" if double else "]"
            if not text.startswith(closer, reader.i):
                raise reader.error(f"'{closer}' was expected after a table name")
            reader.i += len(closer)
            continue
        start = reader.i
        key = reader.key()
        if not text.startswith("=", reader.i):
            raise reader.error("'=' was expected after a key")
        reader.i += 1
        found.append(Entry(table, key, reader.value(), start))
