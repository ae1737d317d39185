"""Line and column of a few nodes, without computing positions for the whole tree.

libcst's PositionProvider tracks line/column for every token of a file (about 2x the parse). The
engine needs positions only for the nodes it reports, so it generates the code once with a codegen
state that notes the token index where each wanted node's syntax starts, the hook libcst's own
position tracking uses (``record_syntactic_position``), and counts lines only up to those points.
The generation stops once every wanted node is marked (the tokens after it are not needed).
"""

from __future__ import annotations

from typing import Dict, Iterable, Tuple

import libcst as cst

from .codegen import NO_OP, CodeState


class _AllMarked(Exception):
    """Every wanted node has its mark: the rest of the code need not be generated."""


class _MarkingState(CodeState):
    def __init__(self, default_indent: str, default_newline: str, wanted) -> None:
        super().__init__(default_indent=default_indent, default_newline=default_newline)
        self.wanted = wanted
        self.marks: Dict[int, int] = {}

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        # called as the node's code starts (``with state.record_syntactic_position(node):``)
        if id(node) in self.wanted and id(node) not in self.marks:
            self.marks[id(node)] = len(self.tokens)
            if len(self.marks) == len(self.wanted):
                raise _AllMarked
        return NO_OP


def positions(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> Dict[int, Tuple[int, int]]:
    """``{id(node): (line, col)}`` (1-based line, 0-based col) for nodes of ``module``."""
    wanted = {id(n) for n in nodes}
    if not wanted:
        return {}
    state = _MarkingState(module.default_indent, module.default_newline, wanted)
    try:
        module._codegen(state)
    except _AllMarked:
        pass
    result: Dict[int, Tuple[int, int]] = {}
    line, col, done = 1, 0, 0
    for node_id, index in sorted(state.marks.items(), key=lambda item: item[1]):
        for token in state.tokens[done:index]:
            newlines = token.count("\n")
            if newlines:
                line += newlines
                col = len(token) - token.rfind("\n") - 1
            else:
                col += len(token)
        done = index
        result[node_id] = (line, col)
    return result
