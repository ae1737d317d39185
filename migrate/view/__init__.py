"""The normalised dataflow view of a function, that every fused rule matches on.

``View(func, scope)`` (``build``) evaluates a function into ``Value``s (``values``): SSA over its
locals, each call, method and operator spelled as one canonical op (``ops``, ``spellings``), the
normalisations of ``normal`` applied in their one ordered list, module attributes and small helpers
of the same module resolved through the ``Scope`` (``scope``). On top of it: the source regions a
match covers (``regions``), shapes and ranks (``shapes``, ``rank``), readers of libcst nodes
(``syntax``) and the writer of a fused site's guarded call (``emit``).

This package sits below the rules and ``context`` (which builds one view per function and shares
it) and above the edit model (``edits``, ``guarded``, ``defuse``, ``tree``): it imports nothing from
the rules.
"""

from .build import View
from .values import Value

__all__ = ["Value", "View"]
