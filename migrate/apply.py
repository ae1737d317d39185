"""Applying the sites of one file: overlap checks, one bottom-up pass, and a check of the output.

``overlaps`` (``migrate.overlaps``) finds the sites whose edits cannot all be applied: two
replacements of one node, two statement ranges of one block that intersect, or an edit inside code
that another edit rebuilds without keeping it (neither as a hole nor as a moved statement). An edit
nested inside a hole, a wrapped node or a moved statement is no conflict: it is applied there
(``Apply`` fills holes with migrated nodes and moves migrated statements).

After the pass, every node an edit produced must be in the output tree (``missing``); the engine
downgrades a site whose result is not there instead of reporting it as rewritten.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Set, Tuple

import libcst as cst

from npu_migrate.migrate.edits import Code, Replace, Site, Splice, edit_codes
from npu_migrate.migrate.guarded import build_region, fill
from npu_migrate.migrate.overlaps import overlaps, wraps  # noqa: F401  (overlaps: the engine's entry)
from npu_migrate.migrate.parens import landing
from npu_migrate.migrate.tree import TreeIndex, children


def _blank_lines_unindented(statement: cst.CSTNode) -> cst.CSTNode:
    """A new statement's leading blank lines without the indentation of the block it lands in (no
    trailing whitespace when it is spliced into an indented block)."""
    lines = getattr(statement, "leading_lines", None)
    if not lines or not any(line.comment is None and line.indent for line in lines):
        return statement
    return statement.with_changes(leading_lines=[
        line.with_changes(indent=False) if line.comment is None else line for line in lines])



class Apply(cst.CSTTransformer):
    """Applies the edits of the kept sites in one bottom-up pass, entering only the nodes that hold
    an edited node or a hole (so libcst keeps every other subtree as it is)."""

    def __init__(self, sites: Iterable[Site], tree: TreeIndex) -> None:
        super().__init__()
        self.replaces: Dict[int, List[Tuple[Site, Replace]]] = {}
        self.blocks: Dict[int, List[Tuple[Site, object]]] = {}
        self.recorded: Set[int] = set()  # original nodes whose migrated form an edit reads
        self.sites = list(sites)
        self.parents = tree.parents()
        wanted: List[cst.CSTNode] = []
        for site in self.sites:
            for edit in site.edits:
                holes = [n for c in edit_codes(edit) for n in c.hole_nodes]
                if isinstance(edit, Replace):
                    self.replaces.setdefault(id(edit.node), []).append((site, edit))
                    wanted.append(edit.node)
                else:
                    self.blocks.setdefault(id(edit.block), []).append((site, edit))
                    holes.extend(edit.block.body)
                wanted.extend(holes)
                self.recorded.update(id(n) for n in holes)
        for pairs in self.replaces.values():
            pairs.sort(key=lambda pair: wraps(pair[1]))  # a wrapper takes the node as replaced
        self.holders = tree.ancestors(wanted)
        self.migrated_nodes: Dict[int, cst.CSTNode] = {}

    def on_visit(self, node) -> bool:
        return id(node) in self.holders

    def migrated(self, node: cst.CSTNode) -> cst.CSTNode:
        found = self.migrated_nodes.get(id(node))
        if found is None:
            raise LookupError(f"no migrated form recorded for a {type(node).__name__} hole")
        return found

    def on_leave(self, original_node, updated_node):
        if id(original_node) in self.blocks:
            updated_node = self._block(original_node, updated_node)
        before = updated_node
        for site, edit in self.replaces.get(id(original_node), ()):
            updated_node = self._replace(site, edit, original_node, updated_node)
        if id(original_node) in self.recorded:
            keep = any(edit.holes_see_original for _, edit in self.replaces.get(id(original_node), ()))
            self.migrated_nodes[id(original_node)] = (_without_parens(before) if _parenthesized(before) else before) \
                if keep else updated_node
        return updated_node

    def _replace(self, site: Site, edit: Replace, original, updated):
        parens = _parenthesized(updated)
        if not isinstance(edit.new, Code):
            new = edit.new
        else:
            self.migrated_nodes[id(original)] = _without_parens(updated) if parens else updated  # for a wrapper
            new = fill(edit.new, "expression" if isinstance(original, cst.BaseExpression) else "statement",
                       self.migrated, self._wrapped)
        if isinstance(original, cst.BaseExpression) and isinstance(new, cst.BaseExpression):
            if parens and isinstance(edit.new, Code) and not _parenthesized(new):
                new = new.with_changes(lpar=updated.lpar, rpar=updated.rpar)  # the replacement keeps the parentheses
            elif not parens:
                new = landing(original, new, self.parents)  # parenthesised where its place needs it
        site.results.extend(new.nodes if isinstance(new, cst.FlattenSentinel) else [new])
        return new

    def _wrapped(self, node: cst.CSTNode, parenthesized: cst.CSTNode) -> None:
        """A node put into new code with parentheses added: a site's result is now that copy."""
        for site in self.sites:
            site.results[:] = [parenthesized if result is node else result for result in site.results]

    def _block(self, original, updated):
        body = list(original.body)
        out: List[cst.BaseStatement] = []
        comments: List[cst.EmptyLine] = []
        index = 0

        def emit(stmts):
            nonlocal comments
            for stmt in stmts:
                if isinstance(stmt, cst.RemovalSentinel):
                    continue
                for one in (stmt.nodes if isinstance(stmt, cst.FlattenSentinel) else [stmt]):
                    if comments:
                        one = one.with_changes(leading_lines=[*comments, *one.leading_lines])
                        comments = []
                    out.append(one)

        for site, edit in sorted(self.blocks[id(original)], key=lambda pair: (pair[1].start, pair[1].end)):
            emit(self.migrated_nodes.get(id(s), s) for s in body[index:edit.start])
            if isinstance(edit, Splice):
                removed = [self.migrated_nodes.get(id(s), s) for s in body[edit.start:edit.end]]
                comments.extend(line for stmt in removed for line in _comment_lines(stmt))
                new = [_blank_lines_unindented(fill(c, "statement", self.migrated, self._wrapped)) for c in edit.new]
            else:
                new = build_region(edit, self.migrated, self._wrapped)
            site.results.extend(new)
            emit(new)
            index = max(index, edit.end)
        emit(self.migrated_nodes.get(id(s), s) for s in body[index:])
        if comments:
            footer = [*comments, *updated.footer] if isinstance(updated, cst.Module) else [*comments, *updated.footer]
            return updated.with_changes(body=out, footer=footer)
        return updated.with_changes(body=out)


def _parenthesized(node) -> bool:
    return bool(getattr(node, "lpar", None))


def _without_parens(node):
    return node.with_changes(lpar=[], rpar=[])


def _comment_lines(stmt) -> List[cst.EmptyLine]:
    """The lines above a removed statement and its trailing comment, to put above the next one."""
    if isinstance(stmt, (cst.RemovalSentinel, cst.FlattenSentinel)):
        return []
    comment = getattr(getattr(stmt, "trailing_whitespace", None), "comment", None)
    return [*stmt.leading_lines, *([cst.EmptyLine(comment=comment)] if comment else [])]


def missing(module: cst.Module, sites: Iterable[Site], original: TreeIndex) -> List[Site]:
    """The sites with a produced node that is not in ``module``. Only the rebuilt part of the new
    tree is walked: a subtree that is an original node holds no produced node (edits make new ones)."""
    unchanged = original.contains
    present: Set[int] = set()
    stack = [module]
    while stack:
        node = stack.pop()
        present.add(id(node))
        if not unchanged(node):
            stack.extend(children(node))
    return [site for site in sites if any(id(node) not in present for node in site.results)]
