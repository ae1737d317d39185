"""The values of the dataflow view (``view.build`` makes them, ``view.normal`` canonicalises them):
one op (``view.ops.Op``) with named arguments, the expression node it was computed from and the
view whose code that node is in, and the small readers every matcher uses (``number``,
``same_value``, ``derived``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, Optional, Tuple

import libcst as cst

from .ops import BY_TEXT, Op

if TYPE_CHECKING:
    from .build import View


@dataclass(eq=False)
class Value:
    op: Op  # given as a member or its text; an op that is not an ``Op`` is refused here
    kw: Dict[str, "Value"] = field(default_factory=dict)
    node: Optional[cst.CSTNode] = None  # the expression that computes it (None: made by the view)
    view: Optional["View"] = None  # whose code ``node`` is in
    name: Optional[str] = None  # param / free / attr / module names, qualified constants, strings
    number: Optional[float] = None  # numeric constants
    items: Tuple["Value", ...] = ()  # tuple and list elements
    via: Optional["Value"] = None  # what a normalised value was read from (a split's item): walked, not compared

    def __post_init__(self) -> None:
        op = BY_TEXT.get(self.op)
        if op is None:
            raise ValueError(f"unknown op {self.op!r}: declare it in migrate/view/ops.py")
        self.op = op

    def __getitem__(self, key: str) -> Optional["Value"]:
        return self.kw.get(key)

    @property
    def input(self) -> Optional["Value"]:
        return self.kw.get("input")

    def is_(self, *ops: Op) -> bool:
        return self.op in ops

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.kw.items())
        label = self.name if self.name is not None else self.number if self.number is not None else ""
        return f"{self.op}({label}{', ' if label != '' and inner else ''}{inner})"


def number(value) -> Optional[float]:
    return value.number if value is not None and value.op == Op.CONST else None


def same_value(a, b) -> bool:
    """Two values that are one computation (the same value, or the same name read twice)."""
    if a is b:
        return True
    return (a is not None and b is not None and a.op == b.op and a.op in (Op.PARAM, Op.FREE, Op.NAME)
            and a.name == b.name)


def derived(value, op, kw, same_node: bool = True):
    """``op(kw)`` in place of ``value``; ``same_node``: the value's source denotes the new value too."""
    return Value(op, kw, node=value.node if same_node else None, view=value.view)


def reaches(value: Optional[Value], found: Callable[[Value], bool], depth: int) -> bool:
    """Whether a value ``found`` accepts computes part of ``value``, at most ``depth`` arguments down
    (through masks, scales and branches: ``phi``)."""
    stack, seen = [(value, 0)], set()
    while stack:
        current, level = stack.pop()
        if current is None or id(current) in seen or level > depth:
            continue
        seen.add(id(current))
        if found(current):
            return True
        stack.extend((child, level + 1) for child in current.kw.values())
    return False
