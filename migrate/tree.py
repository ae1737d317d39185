"""Fast, exact traversal of libcst trees, and an index of one module's subtrees.

libcst's ``node.children`` runs the node's child-replacing visit and then builds (and validates) a
copy of the node, so walking a tree through ``.children`` costs more than parsing it. ``children``
here reads the node's fields directly, in the order that same visit enters them (learnt once per
node type by watching it), so it returns exactly ``node.children`` at a fraction of the cost.

``TreeIndex`` walks a module once; any node's subtree is then a slice of that walk, and its
ancestors a few dictionary look-ups. The engine builds it only for a file that needs it.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterable, List, Optional, Set, Tuple

import libcst as cst


class _FieldOrder(cst.CSTVisitor):
    """Records the fields a node's visit enters, in order, without going below them."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: List[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return False

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        self.fields.append(attribute)


_FIELDS: Dict[type, Tuple[str, ...]] = {}  # node type -> the fields its visit enters, in order
_OTHERS: Dict[type, Tuple[str, ...]] = {}  # node type -> other fields that may hold a node


def _learn(node: cst.CSTNode) -> Tuple[str, ...]:
    """The fields ``node``'s visit enters, and remember them for its type. A few visits skip a field
    that is None (an f-string's ``format_spec``): a node with such a field set is learnt from anew."""
    probe = _FieldOrder()
    node._visit_and_replace_children(probe)
    entered = tuple(dict.fromkeys(probe.fields))
    known = _FIELDS.get(type(node), ())
    if set(known) <= set(entered) or set(entered) <= set(known):
        fields = _FIELDS[type(node)] = max(known, entered, key=len)
        # fields holding a string or a sentinel never hold a node; one that is None here might
        _OTHERS[type(node)] = tuple(f.name for f in dataclasses.fields(node)
                                    if f.name not in fields and getattr(node, f.name) is None)
    return entered


def children(node: cst.CSTNode) -> List[cst.CSTNode]:
    """``node.children``: the same nodes, in the same (source) order, without copying ``node``."""
    fields = _FIELDS.get(type(node))
    others = _OTHERS.get(type(node))
    if fields is None or others and any(getattr(node, name) is not None for name in others):
        fields = _learn(node)
    found: List[cst.CSTNode] = []
    for name in fields:
        value = getattr(node, name)
        if isinstance(value, (tuple, list)):
            found.extend(value)
        elif value is not None and value is not cst.MaybeSentinel.DEFAULT:  # else: a node
            found.append(value)
    return found


def walk(node: cst.CSTNode) -> List[cst.CSTNode]:
    """``node`` and everything below it, in source order."""
    found: List[cst.CSTNode] = []
    stack = [node]
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(reversed(children(node)))
    return found


class TreeIndex:
    """One walk of a tree: every node's subtree, the names read in it, and its ancestors."""

    def __init__(self, root: cst.CSTNode) -> None:
        self._nodes: List[cst.CSTNode] = []
        self._span: Dict[int, Tuple[int, int]] = {}  # id(node) -> its subtree as a slice of _nodes
        self._names: Dict[int, Set[str]] = {}
        self._parent: Optional[Dict[int, cst.CSTNode]] = None  # built on first use
        nodes, span = self._nodes, self._span
        stack: list = [root]
        while stack:
            node = stack.pop()
            if type(node) is int:  # every node below the one listed at this index has been listed
                span[id(nodes[node])] = (node, len(nodes))
                continue
            stack.append(len(nodes))
            nodes.append(node)
            stack.extend(reversed(children(node)))

    def contains(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` (this very object) is a node of the indexed tree."""
        span = self._span.get(id(node))
        return span is not None and self._nodes[span[0]] is node

    def preorder(self) -> Tuple[List[cst.CSTNode], List[int]]:
        """Every node in the order libcst's traversal visits them, and for each the index just past
        its subtree (so a walker knows when to leave it)."""
        ends = [self._span[id(node)][1] for node in self._nodes]
        return self._nodes, ends

    def subtree(self, node: cst.CSTNode) -> List[cst.CSTNode]:
        """``walk(node)``, answered from the index for a node of the tree."""
        span = self._span.get(id(node))
        return self._nodes[span[0]:span[1]] if span is not None else walk(node)

    def names(self, node: cst.CSTNode) -> Set[str]:
        """The value of every ``Name`` in ``node``'s subtree (attribute names included)."""
        found = self._names.get(id(node))
        if found is None:
            found = self._names[id(node)] = {n.value for n in self.subtree(node) if isinstance(n, cst.Name)}
        return found

    def parents(self) -> Dict[int, cst.CSTNode]:
        """``{id(node): its parent}`` for every node of the tree but the root (built on first use)."""
        if self._parent is None:
            self._parent = {}
            above: List[Tuple[int, cst.CSTNode]] = []  # (end of its subtree, node) for the nodes above
            for index, node in enumerate(self._nodes):
                while above and above[-1][0] <= index:
                    above.pop()
                if above:
                    self._parent[id(node)] = above[-1][1]
                above.append((self._span[id(node)][1], node))
        return self._parent

    def ancestors(self, nodes: Iterable[cst.CSTNode]) -> Set[int]:
        """The ids of every node above one of ``nodes``."""
        parent_of = self.parents()
        found: Set[int] = set()
        for node in nodes:
            parent = parent_of.get(id(node))
            while parent is not None and id(parent) not in found:
                found.add(id(parent))
                parent = parent_of.get(id(parent))
        return found
