"""YAML loading that keeps line numbers, so every schema error can say ``file:line: problem``.

Used by the op table and by the parity spec: both validate a composed YAML node tree (which knows
where each value came from) and only then turn it into plain Python values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, Tuple

import yaml


class SchemaError(ValueError):
    """A problem in a user-editable YAML file, located to a line."""

    def __init__(self, path: Path | str, line: int, problem: str):
        self.path, self.line, self.problem = str(path), line, problem
        super().__init__(f"{path}:{line}: {problem}")


def compose(path: Path) -> yaml.Node | None:
    """Parse ``path`` into a node tree; YAML syntax errors become ``SchemaError``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaError(path, 1, f"cannot read file: {exc}") from None
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise SchemaError(path, line, f"invalid YAML: {getattr(exc, 'problem', exc)}") from None


def line_of(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def plain(node: yaml.Node) -> Any:
    """The Python value of a node (safe constructors only)."""
    return yaml.constructor.SafeConstructor().construct_document(node) if node is not None else None


def mapping_items(path: Path, node: yaml.Node, what: str) -> Iterator[Tuple[str, yaml.Node, yaml.Node]]:
    """Yield ``(key, key_node, value_node)`` of a mapping node, rejecting non-mappings and duplicates."""
    if not isinstance(node, yaml.MappingNode):
        raise SchemaError(path, line_of(node), f"{what} must be a mapping")
    seen: Dict[str, int] = {}
    for key_node, value_node in node.value:
        key = key_node.value
        if key in seen:
            raise SchemaError(path, line_of(key_node), f"duplicate key {key!r} in {what} (first at line {seen[key]})")
        seen[key] = line_of(key_node)
        yield key, key_node, value_node


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
