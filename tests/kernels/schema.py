"""A small parser for torch_npu's op schema lines (``opmap/reference/torch_npu_2.14.0_op_schemas.txt``).

Each line looks like ``[custom] name.overload(Type arg, Type? arg=default, *, ...) -> ret   # notes``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from npu_migrate.opmap.reference import OP_SCHEMAS

SCHEMA_FILE = OP_SCHEMAS

NO_DEFAULT = object()


@dataclass(frozen=True)
class Arg:
    type: str
    name: str
    default: Any  # NO_DEFAULT when the argument is required
    kw_only: bool


@dataclass(frozen=True)
class Schema:
    name: str
    overload: str
    args: List[Arg]
    returns: str
    line: int


def _split_top_level(text: str) -> List[str]:
    """Split on commas that are not inside (), [] or quotes."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def parse_default(text: str) -> Any:
    """Schema literal -> Python value: None, True/False, ints, floats ('1.'), strings, int lists."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        return [parse_default(p) for p in _split_top_level(text[1:-1])]
    if text in ("None", "True", "False") or text[:1] in "'\"":
        return ast.literal_eval(text)
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)  # covers "1.", "1e-06", "0.0"
    except ValueError:
        return text  # an enum name such as contiguous_format or Mean


_ARG = re.compile(r"^(?P<type>.+?)\s+(?P<name>\w+)(?:\s*=\s*(?P<default>.+))?$")


def parse_line(line: str, lineno: int = 0) -> Optional[Schema]:
    match = re.match(r"^\[\w+\]\s+(?P<name>[\w.]+)\(", line)
    if not match:
        return None
    open_at = match.end() - 1
    depth = 0
    for close_at in range(open_at, len(line)):
        depth += {"(": 1, ")": -1}.get(line[close_at], 0)
        if depth == 0:
            break
    else:
        raise ValueError(f"line {lineno}: unbalanced parentheses")
    name, _, overload = match.group("name").partition(".")
    args, kw_only = [], False
    for part in _split_top_level(line[open_at + 1:close_at]):
        if part == "*":
            kw_only = True
            continue
        arg = _ARG.match(part)
        if not arg:
            raise ValueError(f"line {lineno}: cannot parse argument {part!r}")
        default = NO_DEFAULT if arg.group("default") is None else parse_default(arg.group("default"))
        args.append(Arg(arg.group("type"), arg.group("name"), default, kw_only))
    returns = line[close_at + 1:].split("#", 1)[0].strip().removeprefix("->").strip()
    return Schema(name, overload, args, returns, lineno)


def load_schemas(path: Path = SCHEMA_FILE) -> Dict[str, Schema]:
    """Base op name -> its schema: the unsuffixed overload if there is one, else the first listed."""
    by_name: Dict[str, Schema] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        schema = parse_line(line, lineno)
        if schema is None:
            continue
        current = by_name.get(schema.name)
        if current is None or (current.overload and not schema.overload):
            by_name[schema.name] = schema
    return by_name
