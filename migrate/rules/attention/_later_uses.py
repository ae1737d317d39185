"""Which statements of a function follow a given one, and which names they read (to tell whether
a value, such as the attention probabilities, is used afterwards and under which condition)."""

from __future__ import annotations

from typing import List, Optional, Tuple

import libcst as cst
import libcst.matchers as m

from ...view.syntax import names_in


def blocks_of(stmt) -> List[cst.BaseSuite]:
    """The blocks directly inside a compound statement (``elif`` chains flattened)."""
    blocks = []
    for attr in ("body", "orelse", "finalbody"):
        part = getattr(stmt, attr, None)
        if isinstance(part, cst.BaseSuite):
            blocks.append(part)
        elif isinstance(part, (cst.Else, cst.Finally)):
            blocks.append(part.body)
        elif isinstance(part, cst.If):
            blocks.extend(blocks_of(part))
    for handler in getattr(stmt, "handlers", ()):
        blocks.append(handler.body)
    return blocks


def _statements_in_order(block) -> List[cst.CSTNode]:
    """Every statement of a block, nested ones included, in source order (not entering defs)."""
    out = []
    for stmt in getattr(block, "body", ()):
        out.append(stmt)
        if not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and not isinstance(stmt, cst.SimpleStatementLine):
            for child in blocks_of(stmt):
                out.extend(_statements_in_order(child))
    return out


def statements_after(body, end_stmt) -> List[cst.CSTNode]:
    """The statements of ``body`` after ``end_stmt`` in source order, nested ones included."""
    order = _statements_in_order(body)
    index = next(i for i, s in enumerate(order) if s is end_stmt)
    # compound statements that enclose end_stmt come before it in the order; their headers were
    # already evaluated, their later statements follow
    return order[index + 1:]


def _header(stmt) -> Optional[cst.CSTNode]:
    for attr in ("test", "iter", "items"):
        part = getattr(stmt, attr, None)
        if part is not None:
            return part if not isinstance(part, (list, tuple)) else cst.Tuple([cst.Element(i.item) for i in part])
    return None


def load_sites_after(body, end_stmt, name: str) -> List[Tuple[str, ...]]:
    """For each later use of ``name``: the names tested by the conditionals that guard it, or
    ``("<return>",)`` for a use in a return statement."""
    sites = []
    for stmt in statements_after(body, end_stmt):
        if not isinstance(stmt, cst.SimpleStatementLine):
            if _header(stmt) is not None and name in names_in(_header(stmt)):
                sites.append(())
            continue
        for small in stmt.body:
            if name not in names_in(small):
                continue
            for use in m.findall(small, m.Name(name)):
                flags = _guarding_flags(small, use)
                sites.append(flags or (("<return>",) if isinstance(small, cst.Return) else ()))
    return sites


def _guarding_flags(root, use) -> Tuple[str, ...]:
    """Names whose truth the use of ``use`` inside ``root`` depends on (IfExp tests)."""
    flags = []
    for ifexp in m.findall(root, m.IfExp()):
        if any(n is use for n in m.findall(ifexp.body, m.Name())) and isinstance(ifexp.test, cst.Name):
            flags.append(ifexp.test.value)
    return tuple(flags)
