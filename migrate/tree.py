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
from bisect import bisect_left
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


_SEQUENCES = (tuple, list)
_DEFAULT = cst.MaybeSentinel.DEFAULT


def children(node: cst.CSTNode) -> List[cst.CSTNode]:
    """``node.children``: the same nodes, in the same (source) order, without copying ``node``."""
    fields = _FIELDS.get(type(node))
    others = _OTHERS.get(type(node))
    if fields is None or others and any(getattr(node, name) is not None for name in others):
        fields = _learn(node)
    found: List[cst.CSTNode] = []
    for name in fields:
        value = getattr(node, name)
        if value.__class__ in _SEQUENCES:
            found.extend(value)
        elif value is not None and value is not _DEFAULT:  # else: a node
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
    """One walk of a tree: every node's subtree, the names read in it, and its parents.

    The walk lists the nodes in libcst's traversal order; a node's subtree is the slice from its
    index to ``ends[index]``. Parents are noted as the walk goes (every rule reads them), and the
    indices of the ``Name`` nodes, so the names of a subtree are a slice too.
    """

    def __init__(self, root: cst.CSTNode) -> None:
        nodes: List[cst.CSTNode] = []
        ends: List[int] = []
        index: Dict[int, int] = {}  # id(node) -> its place in nodes
        parent: Dict[int, cst.CSTNode] = {}
        name_at: List[int] = []  # the places of the Name nodes, ascending
        name_type = cst.Name
        stack: list = [root]
        pop, push, extend = stack.pop, stack.append, stack.extend
        while stack:
            node = pop()
            if node.__class__ is int:  # every node below the one listed at this place has been listed
                ends[node] = len(nodes)
                continue
            at = len(nodes)
            index[id(node)] = at
            nodes.append(node)
            ends.append(0)
            push(at)
            if node.__class__ is name_type:
                name_at.append(at)
            below = children(node)
            for child in below:
                parent[id(child)] = node
            below.reverse()
            extend(below)
        self._nodes, self._ends, self._index, self._parent, self._name_at = nodes, ends, index, parent, name_at
        self._names: Dict[int, Set[str]] = {}
        self._by_class: Optional[Dict[type, List[int]]] = None

    def _span(self, node: cst.CSTNode) -> Optional[Tuple[int, int]]:
        at = self._index.get(id(node))
        if at is None or self._nodes[at] is not node:
            return None
        return at, self._ends[at]

    def span(self, node: cst.CSTNode) -> Optional[Tuple[int, int]]:
        """``node``'s place in the traversal order and the place just past its subtree (None for a
        node outside the tree): ``a`` lies in ``b``'s subtree exactly when ``b``'s span holds ``a``'s start."""
        return self._span(node)

    def contains(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` (this very object) is a node of the indexed tree."""
        return self._span(node) is not None

    def preorder(self) -> Tuple[List[cst.CSTNode], List[int]]:
        """Every node in the order libcst's traversal visits them, and for each the index just past
        its subtree (so a walker knows when to leave it)."""
        return self._nodes, self._ends

    def subtree(self, node: cst.CSTNode) -> List[cst.CSTNode]:
        """``walk(node)``, answered from the index for a node of the tree."""
        span = self._span(node)
        return self._nodes[span[0]:span[1]] if span is not None else walk(node)

    def of_type(self, node: cst.CSTNode, *classes: type) -> List[cst.CSTNode]:
        """The nodes of exactly these classes in ``node``'s subtree, in traversal order. (libcst's
        node classes are abstract base classes, so ``isinstance`` over every node is slow; the
        places of each class are noted once.)"""
        span = self._span(node)
        if span is None:
            return [n for n in walk(node) if n.__class__ in classes]
        if self._by_class is None:
            by_class: Dict[type, List[int]] = {}
            for at, each in enumerate(self._nodes):
                by_class.setdefault(each.__class__, []).append(at)
            self._by_class = by_class
        places: List[int] = []
        for cls in classes:
            found = self._by_class.get(cls, ())
            places += found[bisect_left(found, span[0]):bisect_left(found, span[1])]
        return [self._nodes[at] for at in (sorted(places) if len(classes) > 1 else places)]

    def names(self, node: cst.CSTNode) -> Set[str]:
        """The value of every ``Name`` in ``node``'s subtree (attribute names included)."""
        found = self._names.get(id(node))
        if found is None:
            span = self._span(node)
            if span is None:
                found = {n.value for n in walk(node) if isinstance(n, cst.Name)}
            else:
                nodes, name_at = self._nodes, self._name_at
                places = name_at[bisect_left(name_at, span[0]):bisect_left(name_at, span[1])]
                found = {nodes[at].value for at in places}
            self._names[id(node)] = found
        return found

    def parents(self) -> Dict[int, cst.CSTNode]:
        """``{id(node): its parent}`` for every node of the tree but the root."""
        return self._parent

    def ancestors(self, nodes: Iterable[cst.CSTNode]) -> Set[int]:
        """The ids of every node above one of ``nodes``."""
        parent_of = self._parent
        found: Set[int] = set()
        for node in nodes:
            parent = parent_of.get(id(node))
            while parent is not None and id(parent) not in found:
                found.add(id(parent))
                parent = parent_of.get(id(parent))
        return found
