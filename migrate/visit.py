"""Running the rules' visitors over one file: libcst's batched-visitor protocol, without its cost.

``libcst.visit_batched`` walks a module with ``CSTNode.visit``, which rebuilds every node it passes
(``_visit_and_replace_children`` and ``__post_init__`` validation) even for visitors that only
read: measured on 30 transformers modeling files it was 60% of a whole migration (14.9 s of 25 s).
``visit_batched`` here keeps the protocol (each visitor's ``visit_<Type>`` in visitor order on the
way down, ``leave_<Type>`` on the way up, original nodes, return values ignored) and walks the
index the engine builds anyway (``migrate.tree.TreeIndex``: the same nodes in the same order as
libcst's traversal). Visitors with attribute hooks (``visit_<Type>_<attr>``) go to libcst's walk.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Sequence

import libcst as cst

from npu_migrate.migrate.tree import TreeIndex


def visit_batched(tree: TreeIndex, module: cst.Module, visitors: Sequence[cst.BatchableCSTVisitor]) -> None:
    down: Dict[str, List[Callable]] = {}
    up: Dict[str, List[Callable]] = {}
    for visitor in visitors:
        for name, method in visitor.get_visitors().items():
            kind, _, rest = name.partition("_")
            if "_" in rest:  # an attribute hook: only libcst's walk calls those
                cst.visit_batched(module, visitors)
                return
            (down if kind == "visit" else up).setdefault(rest, []).append(method)
    nodes, ends = tree.preorder()
    open_nodes: List[int] = []  # indices of the nodes whose subtree is being walked
    for index, node in enumerate(nodes):
        while open_nodes and ends[open_nodes[-1]] <= index:
            _leave(nodes[open_nodes.pop()], up)
        for method in down.get(type(node).__name__, ()):
            method(node)
        open_nodes.append(index)
    while open_nodes:
        _leave(nodes[open_nodes.pop()], up)


def _leave(node: cst.CSTNode, up: Dict[str, List[Callable]]) -> None:
    for method in up.get(type(node).__name__, ()):
        method(node)
