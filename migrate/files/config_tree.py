"""YAML and JSON configuration files as trees whose nodes know where they are in the text, so that a
value can be edited in place (comments, quoting and layout stay as they were, byte for byte).

``yaml_tree`` reads every document of a YAML file with PyYAML's composer (its marks are character
offsets); ``json_tree`` reads JSON, and the JSON with comments and trailing commas that editors
and tools accept (VS Code's ``launch.json``, ``tsconfig``-style files), with a small reader of its
own (``json`` keeps no offsets). Both raise ``FileSyntaxError`` with the line where the text stops
being valid.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import List, Optional

import yaml

from npu_migrate.migrate.files.base import FileSyntaxError

MAP, SEQ, SCALAR = "map", "seq", "scalar"


@dataclass
class Node:
    kind: str  # MAP, SEQ or SCALAR
    start: int  # offsets of the node's text (a quoted scalar: its quotes included)
    end: int
    value: str = ""  # a scalar's value (a JSON number, true, false or null: as written)
    string: bool = True  # a scalar that is a string (not a number, boolean or null)
    verbatim: Optional[int] = None  # offset of ``value``'s text when it stands in the file as it is
    body: Optional[int] = None  # a YAML literal block (``|``): where its lines start (they end at ``end``)
    items: List = field(default_factory=list)  # SEQ: [Node]; MAP: [(key Node, value Node)]


def _verbatim(text: str, start: int, end: int, value: str) -> Optional[int]:
    """Where ``value`` stands unchanged in ``text[start:end]``: the whole token, or inside its quotes."""
    token = text[start:end]
    if token == value:
        return start
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "'\"" and token[1:-1] == value:
        return start + 1
    return None


# -- YAML ------------------------------------------------------------------------------------------
_STRING_TAG = "tag:yaml.org,2002:str"
_PROPERTIES = re.compile(r"(?:[&!][^\s]*\s+)+")  # a node's anchor and tag, before its value


def _yaml_scalar_at(text: str, start: int) -> int:
    """Past the anchor (``&name``) and tag (``!tag``) a scalar's mark starts with."""
    match = _PROPERTIES.match(text, start)
    return match.end() if match else start


def _from_yaml(text: str, node: yaml.Node, seen: dict) -> Node:
    if id(node) in seen:  # an alias (or a merge key) repeats its anchor's node: one Node for both
        return seen[id(node)]
    start, end = node.start_mark.index, node.end_mark.index
    if isinstance(node, yaml.ScalarNode):
        start = _yaml_scalar_at(text, start) if text[start:start + 1] in "&!" else start
        out = Node(SCALAR, start, end, node.value, node.tag == _STRING_TAG,
                   _verbatim(text, start, end, node.value) if node.style in (None, "'", '"') else None)
        if node.style == "|":
            out.body = text.find("\n", start, end) + 1 or None
        seen[id(node)] = out
        return out
    out = Node(MAP if isinstance(node, yaml.MappingNode) else SEQ, start, end)
    seen[id(node)] = out
    if isinstance(node, yaml.MappingNode):
        out.items = [(_from_yaml(text, k, seen), _from_yaml(text, v, seen)) for k, v in node.value]
    else:
        out.items = [_from_yaml(text, item, seen) for item in node.value]
    return out


def yaml_tree(text: str) -> List[Node]:
    """One tree per document of a YAML stream."""
    try:
        documents = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise FileSyntaxError(line, f"does not parse as YAML ({getattr(exc, 'problem', None) or exc} at line {line})"
                              ) from None
    seen: dict = {}
    return [_from_yaml(text, doc, seen) for doc in documents if doc is not None]


# -- JSON ------------------------------------------------------------------------------------------
_SPACE = re.compile(r"(?:\s+|//[^\n]*|/\*.*?\*/)*", re.S)  # whitespace and comments (JSON with comments)
_LITERAL = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")


class _Json:
    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def fail(self, what: str) -> FileSyntaxError:
        line = self.text.count("\n", 0, self.at) + 1
        return FileSyntaxError(line, f"does not parse as JSON ({what} at line {line})")

    def space(self) -> None:
        self.at = _SPACE.match(self.text, self.at).end()

    def value(self, depth: int = 0) -> Node:
        if depth > 500:
            raise self.fail("nesting too deep")
        self.space()
        start, char = self.at, self.text[self.at:self.at + 1]
        if char == "{":
            return self._container(MAP, "}", depth)
        if char == "[":
            return self._container(SEQ, "]", depth)
        if char == '"':
            return self.string()
        match = _LITERAL.match(self.text, start)
        if not match:
            raise self.fail(f"unexpected {char!r}" if char else "unexpected end of file")
        self.at = match.end()
        return Node(SCALAR, start, self.at, match.group(), False, start)

    def string(self) -> Node:
        start = self.at
        try:
            value, self.at = json.decoder.scanstring(self.text, start + 1, True)
        except ValueError as exc:
            raise self.fail(f"bad string ({exc})") from None
        return Node(SCALAR, start, self.at, value, True, _verbatim(self.text, start, self.at, value))

    def _container(self, kind: str, close: str, depth: int) -> Node:
        node = Node(kind, self.at, self.at)
        self.at += 1
        while True:
            self.space()
            if self.text.startswith(close, self.at):
                self.at += 1
                node.end = self.at
                return node
            if kind == MAP:
                if not self.text.startswith('"', self.at):
                    raise self.fail("a key is not a string")
                key = self.string()
                self.space()
                if not self.text.startswith(":", self.at):
                    raise self.fail("no ':' after a key")
                self.at += 1
                node.items.append((key, self.value(depth + 1)))
            else:
                node.items.append(self.value(depth + 1))
            self.space()
            if self.text.startswith(",", self.at):
                self.at += 1
            elif not self.text.startswith(close, self.at):
                raise self.fail(f"expected ',' or {close!r}")


def json_tree(text: str) -> List[Node]:
    """The document of a JSON file (comments and trailing commas allowed)."""
    reader = _Json(text)
    reader.at = 1 if text.startswith("\ufeff") else 0
    reader.space()
    if reader.at == len(text):
        return []
    node = reader.value()
    reader.space()
    if reader.at != len(text):
        raise reader.fail("text after the document")
    return [node]


def walk(node: Node):
    """(key path, value Node, whether it is a list item) for every value under ``node`` in text
    order, each node once (a YAML alias is its anchor's node); a list's items carry the key of the
    list."""
    seen = set()
    todo = [((), node, False)]
    while todo:
        path, current, item = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield path, current, item
        if current.kind == MAP:
            todo += [(path + (k.value,), v, False) for k, v in reversed(current.items)]
        elif current.kind == SEQ:
            todo += [(path, v, True) for v in reversed(current.items)]
