"""Definitions and uses of local names, for checking that a moved region keeps its meaning.

A guarded region moves statements into the ``else`` branch of ``if guard: fused``. That is sound
only when (1) the guard and the fused statements read nothing the moved statements (re)define: they
run instead of them, so they would see the value from before the region; and (2) the code after
the region reads nothing that only one branch defines. ``region_problem`` checks both, and that the
statements hoisted before the ``if`` may move there.

Reads are over-approximated (every ``Name`` that is not a binding target, nested functions and
lambdas included) and definitions are exact for the statement forms Python has, so a check errs
towards refusing.
"""

from __future__ import annotations

from typing import Iterable, List, Mapping, Optional, Sequence, Set

import libcst as cst

from .names import target_names
from .refusal import Refusal, RefusalKind
from .tree import children, walk

_LOOPS = (cst.For, cst.While)
_JUMPS = (cst.Return, cst.Break, cst.Continue, cst.Raise, cst.Yield, cst.Await)


def defined(nodes: Iterable[cst.CSTNode]) -> Set[str]:
    """Local names bound anywhere in ``nodes`` (not inside nested functions, classes or lambdas,
    whose bindings are their own; their names are bound here)."""
    found: Set[str] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            found.add(node.name.value)
            continue
        if isinstance(node, cst.Lambda):
            continue
        if isinstance(node, cst.AssignTarget):
            found.update(target_names(node.target))
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
            found.update(target_names(node.target))
        elif isinstance(node, (cst.For, cst.CompFor)):
            found.update(target_names(node.target))
        elif isinstance(node, cst.AsName):
            found.update(target_names(node.name))
        elif isinstance(node, cst.NamedExpr):
            found.update(target_names(node.target))
        elif isinstance(node, cst.Del):
            found.update(target_names(node.target))
        elif isinstance(node, cst.ImportAlias) and node.asname is None:
            name = node.name
            while isinstance(name, cst.Attribute):
                name = name.value
            found.add(name.value)
        stack.extend(children(node))
    return found


def read(nodes: Iterable[cst.CSTNode], skip: Set[int] = frozenset()) -> Set[str]:
    """Every name read in ``nodes`` (attribute names after a dot and keyword names excluded; names
    read by nested functions and lambdas included: they may run later); subtrees in ``skip`` (ids)
    are left out."""
    found: Set[str] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if id(node) in skip:
            continue
        if isinstance(node, cst.Name):
            found.add(node.value)
            continue
        if isinstance(node, cst.Attribute):
            stack.append(node.value)
            continue
        if isinstance(node, cst.Arg):
            stack.append(node.value)
            continue
        if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign)) and isinstance(node.target, cst.Name):
            if isinstance(node, cst.AugAssign):
                found.add(node.target.value)  # x += 1 reads x
            for part in children(node):
                if part is not node.target:
                    stack.append(part)
            continue
        if isinstance(node, cst.FunctionDef):
            stack.extend(node.decorators)
            stack.append(node.params)
            stack.append(node.body)
            continue
        if isinstance(node, cst.Param):
            stack.extend(n for n in (node.annotation, node.default) if n is not None)
            continue
        stack.extend(children(node))
    return found


def jumps(nodes: Iterable[cst.CSTNode]) -> bool:
    """Whether control leaves the statements other than by falling through (not counting nested
    functions)."""
    for node in nodes:
        for inner in walk(node):
            if isinstance(inner, _JUMPS):
                return True
    return False


def _path(root: cst.CSTNode, target: cst.CSTNode) -> Optional[List[cst.CSTNode]]:
    """The nodes from ``root`` down to ``target`` (both included), or None."""
    stack = [(root, [root])]
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        if isinstance(node, (cst.BaseExpression, cst.SimpleStatementLine)):
            continue  # statements hold blocks; expressions hold none
        stack.extend((child, path + [child]) for child in children(node))
    return None


def reads_after(scope: cst.CSTNode, block: cst.CSTNode, end: int, skip: Set[int] = frozenset()) -> Set[str]:
    """Names read by code that may run after statement ``end - 1`` of ``block`` within ``scope``
    (a function body or the module): the rest of every enclosing block, the whole of an enclosing
    loop (its next iteration) and the handlers and ``finally`` of an enclosing ``try``."""
    path = _path(scope, block)
    if path is None:
        raise ValueError("block is not inside scope")
    found = read(block.body[end:], skip)
    for outer, inner in zip(reversed(path[:-1]), reversed(path[1:])):
        body = getattr(outer, "body", None)
        if isinstance(outer, (cst.IndentedBlock, cst.Module)):
            found |= read(body[list(body).index(inner) + 1:], skip)
        elif isinstance(outer, _LOOPS):
            found |= read([outer], skip)
        elif isinstance(outer, (cst.Try, cst.TryStar)):
            found |= read([*outer.handlers, *(p for p in (outer.orelse, outer.finalbody) if p is not None)], skip)
    return found


def region_problem(scope: cst.CSTNode, block, start: int, end: int, hoisted: Sequence[int],
                   fused_reads: Set[str], fused_defines: Set[str], fused_returns: bool = False,
                   reads_at: Optional[Mapping[str, int]] = None, fallback_defines: Set[str] = frozenset(),
                   replaced: Optional[cst.CSTNode] = None) -> Optional[Refusal]:
    """Why moving ``block.body[start:end]`` behind ``if guard: fused`` would change the meaning, or
    None when it keeps it. ``fused_reads``: names the guard and the fused statements read;
    ``fused_defines``: names the fused statements bind; ``reads_at``: for a name, the statement at
    which the original reads the value the fused code stands for (a statement that reads and then
    rebinds it, ``x = f(x)``, reads it first); by default any moved definition makes it stale;
    ``replaced``: an expression after the region that the rewrite replaces (its reads do not count)."""
    body = list(block.body)
    moved = [body[i] for i in range(start, end) if i not in hoisted]
    moved_defines = defined(moved)
    for index in hoisted:
        before = [body[i] for i in range(start, index) if i not in hoisted]
        stmt = body[index]
        sets = ", ".join(f"`{n}`" for n in sorted(defined([stmt]))) or "nothing"
        uses = read([stmt]) & defined(before)
        if uses:
            return Refusal(RefusalKind.HOISTED_READS_EARLIER,
                           f"the statement that sets {sets} reads `{sorted(uses)[0]}`, which the statements before it "
                           "compute, so the fused call cannot have it first", sorted(uses)[0])
        clash = defined([stmt]) & (read(before) | defined(before))
        if clash:
            return Refusal(RefusalKind.HOISTED_CLASH, f"`{sorted(clash)[0]}` is set both inside the computation and by a "
                           "statement the fused call needs first", sorted(clash)[0])
    at = reads_at or {}
    stale = {name for name in fused_reads for i in range(start, min(end, at.get(name, end)))
             if i not in hoisted and name in defined([body[i]])}
    if stale:
        name = sorted(stale)[0]
        return Refusal(RefusalKind.STALE_READ,
                       f"the fused call would read `{name}` from before the region, but the original redefines it first", name)
    if jumps(moved) and not fused_returns:
        return Refusal(RefusalKind.EARLY_EXIT,
                       "the statements leave the region early (return, break, raise or yield), which the fused path would skip")
    if fused_returns:
        return None
    later = reads_after(scope, block, end, {id(replaced)} if replaced is not None else frozenset())
    one_sided = ((moved_defines | fallback_defines) ^ fused_defines) & later
    if one_sided:
        name = sorted(one_sided)[0]
        original = name in moved_defines | fallback_defines
        kind = RefusalKind.READ_AFTER_ORIGINAL_ONLY if original else RefusalKind.READ_AFTER_FUSED_ONLY
        side = "the original" if original else "the fused"
        return Refusal(kind, f"`{name}` is read after the region but only {side} branch defines it", name)
    return None
