"""The one strict YAML loader of user-editable files (op tables and parity specs): every problem is
a ``SchemaError`` that says ``file:line: problem``, never a traceback.

``compose`` parses a file into a node tree (which knows where each value came from) and refuses,
before anything is constructed, what a data file has no use for: tags other than the plain
scalar, list and mapping ones (``!!python/object`` and friends, custom ``!tags``), merge keys
(``<<``), list or mapping keys (unhashable), a key repeated in one mapping (a second top-level
``records:`` or ``cases:`` would silently replace the first), and nesting deeper than
``MAX_DEPTH`` levels. Aliases of anchors are allowed (the built-in op table shares preconditions
that way); shared nodes are checked once, so they cannot blow up the checks. The callers then
validate the nodes with the helpers below and only turn checked nodes into plain values.
"""

from __future__ import annotations

import keyword
import math
import re
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

import yaml

from .errors import SchemaError  # noqa: F401  (raised here; declared without YAML)

MAX_DEPTH = 32  # nesting levels of lists and mappings; real op tables and specs use fewer than 8
_TAG = "tag:yaml.org,2002:"
PLAIN_TAGS = {f"{_TAG}{name}": name for name in ("str", "int", "float", "bool", "null", "seq", "map")}
DOTTED_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def line_of(node: yaml.Node) -> int:
    return node.start_mark.line + 1


class _Composer(yaml.SafeLoader):
    """The safe loader's composer with a nesting limit (the composer recurses per level)."""

    def __init__(self, text: str, path: Path):
        super().__init__(text)
        self._path, self._depth = path, 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise SchemaError(self._path, line, f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def compose(path: Path) -> Optional[yaml.Node]:
    """Parse ``path`` into a checked node tree (None for an empty file); raises ``SchemaError``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaError(path, 1, f"cannot read file: {getattr(exc, 'strerror', None) or exc}") from None
    loader = _Composer(text, path)
    try:
        root = loader.get_single_node()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise SchemaError(path, line, f"invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
    finally:
        loader.dispose()
    if root is not None:
        _check_tree(path, root)
    return root


def _check_tree(path: Path, root: yaml.Node) -> None:
    """Tags, keys and duplicates of every node, each shared node once (iteratively)."""
    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.tag not in PLAIN_TAGS:
            shown = "!!" + node.tag[len(_TAG):] if node.tag.startswith(_TAG) else node.tag
            if node.tag == f"{_TAG}merge":
                raise SchemaError(path, line_of(node), "merge keys (<<) are not supported: write the keys out")
            raise SchemaError(path, line_of(node), f"YAML tag {shown} is not allowed: only plain values, lists and mappings")
        if isinstance(node, yaml.MappingNode):
            first: Dict[Any, int] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    kind = "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
                    raise SchemaError(path, line_of(key_node), f"a mapping key must be a plain value, not a {kind} (unhashable)")
                if key_node.value in first:
                    raise SchemaError(path, line_of(key_node),
                                      f"duplicate key {key_node.value!r} (first at line {first[key_node.value]})")
                first[key_node.value] = line_of(key_node)
                stack += [key_node, value_node]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value


def plain(node: Optional[yaml.Node]) -> Any:
    """The Python value of a checked node (safe constructors only)."""
    return yaml.constructor.SafeConstructor().construct_document(node) if node is not None else None


def mapping_items(path: Path, node: yaml.Node, what: str) -> Iterator[Tuple[str, yaml.Node, yaml.Node]]:
    """Yield ``(key, key_node, value_node)`` of a mapping node (``compose`` rejected duplicates)."""
    if not isinstance(node, yaml.MappingNode):
        raise SchemaError(path, line_of(node), f"{what} must be a mapping")
    for key_node, value_node in node.value:
        yield key_node.value, key_node, value_node


def check_keys(path: Path, node: yaml.Node, allowed, required, what: str) -> Dict[str, yaml.Node]:
    """Return ``{key: value_node}`` after rejecting unknown keys and reporting missing ones."""
    found: Dict[str, yaml.Node] = {}
    for key, key_node, value_node in mapping_items(path, node, what):
        if key not in allowed:
            raise SchemaError(path, line_of(key_node), f"unknown key {key!r} in {what} (allowed: {', '.join(sorted(allowed))})")
        found[key] = value_node
    for key in required:
        if key not in found:
            raise SchemaError(path, line_of(node), f"{what} is missing required key {key!r}")
    return found


def number_problem(value: Any, minimum: Optional[float] = None) -> Optional[str]:
    """Why ``value`` is not a finite number (at least ``minimum``), or None. A string that reads
    as a number counts (YAML 1.1 reads ``1e-3``, without a dot, as a string)."""
    if isinstance(value, bool):
        return f"must be a number, got {value!r}"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return f"must be a number, got {value!r}"
    if not math.isfinite(number):
        return f"must be a finite number, got {value!r}"
    if minimum is not None and number < minimum:
        return f"must be at least {minimum:g}, got {value!r}"
    return None


def dotted_name_problem(value: Any) -> Optional[str]:
    """Why ``value`` is not a dotted Python name such as ``torch_npu.npu_rms_norm``, or None."""
    if not isinstance(value, str) or not DOTTED_NAME.match(value):
        return f"must be a dotted Python name (like torch_npu.npu_rms_norm), got {value!r}"
    reserved = [part for part in value.split(".") if keyword.iskeyword(part)]
    if reserved:
        return f"must be a dotted Python name, but {reserved[0]!r} is a Python keyword"
    return None
