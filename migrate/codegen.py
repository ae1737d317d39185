"""libcst's code generation with a cheaper codegen state: the same tokens, about a third less time.

Every node's ``_codegen`` enters ``state.record_syntactic_position(node)``, which libcst's own
``CodegenState`` implements as a ``@contextmanager`` generator that does nothing for plain code
generation; building and driving one generator per node is about a third of ``Module.code``
(measured on transformers modeling files). ``CodeState`` answers the same protocol with one reused
no-op context manager, so ``code(module)`` is exactly ``module.code`` (and ``code(module, node)``
``module.code_for_node(node)``) at lower cost. ``migrate.positions`` builds on the same state.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst
from libcst._nodes.internal import CodegenState


class _NoOp:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> bool:
        return False


NO_OP = _NoOp()


class CodeState(CodegenState):
    """libcst's codegen state whose position hook costs one call (the hook records nothing)."""

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        return NO_OP


def code(module: cst.Module, node: Optional[cst.CSTNode] = None) -> str:
    """``module.code``, or ``module.code_for_node(node)`` for a node."""
    state = CodeState(default_indent=module.default_indent, default_newline=module.default_newline)
    (module if node is None else node)._codegen(state)
    return "".join(state.tokens)
