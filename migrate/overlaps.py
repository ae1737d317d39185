"""Which sites of one file cannot all be applied: their edits would discard each other's result.

The pair rule (``loses``): an edit is lost when another site's edit rebuilds a node at or above the
place of its result (a replaced node, or the statements a splice removes) without keeping, on the
way up, a node of its own as a hole; two statement edits of one block lose when their ranges
intersect; two replacements of one node compose when one of them wraps the node (keeps it as a
hole). Sites are taken in order, and a site is kept unless one of its edits and one of a kept
site's edits would discard each other's result.

Comparing every pair costs O(n²) (25 s for 3,000 sites in one generated file), so ``overlaps``
answers the same question with sorted intervals. Every node of the tree is an interval of the
traversal order (``TreeIndex.span``): a node lies on the path from ``p`` up to ``r`` exactly when
its interval holds ``p``'s start and lies inside ``r``'s. So what a rebuilding edit discards is its
rebuilt intervals minus its holes' (its *exposed* intervals), and the pair rule becomes: the start
of one edit's place lies in the other's exposed intervals (or a same-node case, decided by
``loses`` itself). Two minimum trees over the starts of every edit's place answer, for a new site,
the earliest kept site whose exposed intervals hold its places and the earliest kept place inside
its own exposed intervals; per block, a third pair answers the intersecting statement ranges. Each
site costs O((edits + holes) log n).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Dict, Iterable, List, Sequence, Set, Tuple

import libcst as cst

from npu_migrate.migrate.edits import Guarded, Replace, Site, Splice, edit_codes
from npu_migrate.migrate.tree import TreeIndex

StatementEdit = (Splice, Guarded)
NONE = float("inf")  # "no kept site" in the minimum trees


# -- the pair rule -----------------------------------------------------------------------------------
def kept_ids(edit) -> Set[int]:
    """Ids of the original nodes whose migrated form ``edit`` keeps inside what it builds."""
    return {id(n) for c in edit_codes(edit) for n in c.hole_nodes}


def rebuilt(edit) -> List[cst.CSTNode]:
    """The nodes whose whole subtree ``edit`` rebuilds (what is inside is lost unless kept as a
    hole); a guarded region rebuilds nothing: it moves its statements as migrated."""
    if isinstance(edit, Replace):
        return [edit.node]
    if isinstance(edit, Splice):
        return list(edit.block.body[edit.start:edit.end])
    return []


def placed(edit) -> cst.CSTNode:
    """Where the result of ``edit`` goes: the replaced node, or the block whose statements change."""
    return edit.node if isinstance(edit, Replace) else edit.block


def wraps(edit) -> bool:
    """A replacement that keeps the node it replaces (``(fused if guard else {orig})``)."""
    return isinstance(edit, Replace) and id(edit.node) in kept_ids(edit)


def loses(edit, other, parent: Dict[int, cst.CSTNode]) -> bool:
    """Whether ``other`` (an edit of another site) would discard the result of ``edit``."""
    if isinstance(edit, StatementEdit) and isinstance(other, StatementEdit) and edit.block is other.block:
        if max(edit.start, other.start) < min(edit.end, other.end):
            return True
    rebuilt_ids = {id(n) for n in rebuilt(other)}
    if not rebuilt_ids:
        return False
    kept = kept_ids(other)
    place = placed(edit)
    path_kept = False
    node = place
    while node is not None:
        path_kept = path_kept or id(node) in kept
        if id(node) in rebuilt_ids:
            if node is place and isinstance(edit, Replace) and isinstance(other, Replace):
                return not (wraps(edit) or wraps(other))  # one wraps the other: they compose
            return not path_kept
        node = parent.get(id(node))
    return False


def describe(site: Site) -> str:
    return f"{site.finding.code} at {site.finding.line}:{site.finding.col}"


# -- intervals -----------------------------------------------------------------------------------------
class MinTree:
    """Positions ``0..size-1``; values are put at a position or over a range of positions, and the
    smallest value at the positions of a range (``smallest_in``), or over a position
    (``smallest_over``), is read back in O(log size)."""

    def __init__(self, size: int) -> None:
        self.half = 1
        while self.half < max(size, 1):
            self.half *= 2
        self.at = [NONE] * (2 * self.half)  # subtree minimum of the values put at positions
        self.over = [NONE] * (2 * self.half)  # the values put over a whole subtree

    def put_at(self, position: int, value: int) -> None:
        i = position + self.half
        while i and value < self.at[i]:
            self.at[i] = value
            i //= 2

    def put_over(self, start: int, end: int, value: int) -> None:
        lo, hi = start + self.half, end + self.half
        while lo < hi:
            if lo & 1:
                self.over[lo] = min(self.over[lo], value)
                lo += 1
            if hi & 1:
                hi -= 1
                self.over[hi] = min(self.over[hi], value)
            lo //= 2
            hi //= 2

    def smallest_in(self, start: int, end: int) -> float:
        found = NONE
        lo, hi = start + self.half, end + self.half
        while lo < hi:
            if lo & 1:
                found = min(found, self.at[lo])
                lo += 1
            if hi & 1:
                hi -= 1
                found = min(found, self.at[hi])
            lo //= 2
            hi //= 2
        return found

    def smallest_over(self, position: int) -> float:
        found, i = NONE, position + self.half
        while i:
            found = min(found, self.over[i])
            i //= 2
        return found


class _Spans:
    """Each node's interval of the traversal order; a node outside the tree gets one of its own
    (as for the pair rule, which finds no parent for it)."""

    def __init__(self, tree: TreeIndex) -> None:
        self.tree = tree
        self.extra: Dict[int, Tuple[int, int]] = {}
        self.next = len(tree.preorder()[0])

    def __call__(self, node: cst.CSTNode) -> Tuple[int, int]:
        span = self.tree.span(node)
        if span is None:
            span = self.extra.get(id(node))
            if span is None:
                span = self.extra[id(node)] = (self.next, self.next + 1)
                self.next += 1
        return span


def exposed(edit, spans: _Spans) -> List[Tuple[int, int]]:
    """The intervals of the nodes whose edits ``edit`` discards: its rebuilt nodes minus its holes.
    A replacement's own node is left out (whether two edits of one node compose is the pair rule's
    call)."""
    holes = [spans(n) for c in edit_codes(edit) for n in c.hole_nodes]
    found = []
    for node in rebuilt(edit):
        start, end = spans(node)
        inside = sorted(h for h in holes if start <= h[0] and h[1] <= end)  # a wrapper's own node too
        at = start + 1 if isinstance(edit, Replace) else start
        for hole_start, hole_end in inside:
            if at < hole_start:
                found.append((at, hole_start))
            at = max(at, hole_end)
        if at < end:
            found.append((at, end))
    return found


class _Block:
    """The kept statement ranges of one block: the starts (``put_at``) and the ranges (``put_over``)
    of the non-empty ones, over the starts of every statement edit of the block."""

    def __init__(self, starts: Iterable[int]) -> None:
        self.starts = sorted(set(starts))
        self.tree = MinTree(len(self.starts))

    def index(self, statement: int) -> int:
        return bisect_left(self.starts, statement)

    def add(self, edit, order: int) -> None:
        if edit.start < edit.end:
            self.tree.put_at(self.index(edit.start), order)
            self.tree.put_over(self.index(edit.start), self.index(edit.end), order)

    def intersecting(self, edit) -> float:
        """The earliest kept range that intersects ``edit``'s (ranges are half-open)."""
        if edit.start >= edit.end:
            return NONE
        return min(self.tree.smallest_in(self.index(edit.start), self.index(edit.end)),
                   self.tree.smallest_over(self.index(edit.start)))


def overlaps(sites: Sequence[Site], tree: TreeIndex) -> Dict[int, str]:
    """``{id(site): why}`` for the sites to leave out: taken in order, a site is kept unless one of
    its edits and one of a kept site's edits would discard each other's result (``loses``)."""
    parent = tree.parents()
    spans = _Spans(tree)
    edits = [edit for site in sites for edit in site.edits]
    places = sorted({spans(placed(e))[0] for e in edits})
    position = {start: i for i, start in enumerate(places)}

    def positions(start: int, end: int) -> Tuple[int, int]:
        return bisect_left(places, start), bisect_left(places, end)

    kept_places = MinTree(len(places))  # at each place: the earliest kept edit placed there
    kept_exposed = MinTree(len(places))  # over each place: the earliest kept edit that discards it
    starts: Dict[int, List[int]] = {}
    for edit in edits:
        if isinstance(edit, StatementEdit):
            starts.setdefault(id(edit.block), []).append(edit.start)
    blocks = {key: _Block(each) for key, each in starts.items()}
    placed_at: Dict[int, List[Tuple[int, object]]] = {}  # id(node) -> kept (order, edit) placed there
    replacing: Dict[int, List[Tuple[int, object]]] = {}  # id(node) -> kept (order, Replace) of it
    kept: List[Site] = []
    dropped: Dict[int, str] = {}
    for site in sites:
        first = NONE
        for edit in site.edits:
            place = placed(edit)
            first = min(first, kept_exposed.smallest_over(position[spans(place)[0]]))
            first = min([first] + [order for order, other in replacing.get(id(place), ()) if loses(edit, other, parent)])
            for start, end in exposed(edit, spans):
                first = min(first, kept_places.smallest_in(*positions(start, end)))
            if isinstance(edit, Replace):
                first = min([first] + [order for order, other in placed_at.get(id(place), ())
                                       if loses(other, edit, parent)])
            if isinstance(edit, StatementEdit):
                first = min(first, blocks[id(edit.block)].intersecting(edit))
        if first != NONE:
            dropped[id(site)] = f"it overlaps the rewrite of {describe(kept[int(first)])}"
            continue
        order = len(kept)
        kept.append(site)
        for edit in site.edits:
            place = placed(edit)
            kept_places.put_at(position[spans(place)[0]], order)
            placed_at.setdefault(id(place), []).append((order, edit))
            for start, end in exposed(edit, spans):
                kept_exposed.put_over(*positions(start, end), order)
            if isinstance(edit, Replace):
                replacing.setdefault(id(place), []).append((order, edit))
            if isinstance(edit, StatementEdit):
                blocks[id(edit.block)].add(edit, order)
    return dropped


def overlaps_pairwise(sites: Sequence[Site], tree: TreeIndex) -> Dict[int, str]:
    """``overlaps`` by comparing every pair (O(n²)): the definition the fast one is tested against."""
    parent = tree.parents()
    kept: List[Site] = []
    dropped: Dict[int, str] = {}
    for site in sites:
        for other in kept:
            if any(loses(a, b, parent) or loses(b, a, parent) for a in site.edits for b in other.edits):
                dropped[id(site)] = f"it overlaps the rewrite of {describe(other)}"
                break
        else:
            kept.append(site)
    return dropped
