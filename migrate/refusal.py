"""Why a site is not rewritten, as data: a ``Refusal`` is the reason a finding states (its text)
with a ``kind``, the local ``name`` it is about, and, when the matcher already knows them, the
``node`` to point at and the ``fallback`` plan for the user. Every fused rule's matcher and writer
returns one where it cannot go on (``match(view) -> Match | Refusal``, ``write(...) -> Written |
Refusal``), and the region checks (``defuse``) return one when a move would change what the code
computes. Code that reacts to a refusal (``view.emit`` hoists a binding read after a region; the
attention and router rules add a flag or the kernel's extra output for a name read afterwards)
reads ``kind`` and ``name``, never the wording. A low module: it imports no rule and no view."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from ..opmap import Fallback


class RefusalKind(Enum):
    # what the code computes, as the matcher reads it (reported with a plan)
    FORM = "the code computes something the kernel does not compute exactly"
    # where the fused call would go
    OPERAND = "an operand is not available as source where the guard runs"
    PLACE = "the computation's statements cannot be delimited as one region"
    OUTPUT = "the result is not bound in a form the fused call can write"
    # moving the computation's statements into a guarded region (migrate.defuse)
    HOISTED_READS_EARLIER = "a hoisted statement reads what the statements before it compute"
    HOISTED_CLASH = "a hoisted statement sets a name the region also sets"
    STALE_READ = "the fused call would read a name before the original redefines it"
    EARLY_EXIT = "the region leaves early (return, break, raise or yield)"
    READ_AFTER_ORIGINAL_ONLY = "a name read after the region is defined only by the original branch"
    READ_AFTER_FUSED_ONLY = "a name read after the region is defined only by the fused branch"


class Refusal(str):
    """The reason (this string, as the finding words it) and its ``kind``; ``name``: the local name
    it is about; ``node``: where the finding points (None: the rule's own anchor); ``root``: where
    to point instead when ``node`` lies outside the function being rewritten (in a helper it
    calls); ``fallback``: the plan the finding offers (None: the rule's default plan). It is a
    ``str`` so that a message quoting a reason reads naturally; decisions read the fields."""

    kind: RefusalKind
    name: Optional[str]
    node: Any
    root: Any
    fallback: Optional["Fallback"]

    def __new__(cls, kind: RefusalKind, reason: str, name: Optional[str] = None, *, node=None, root=None,
                fallback: Optional["Fallback"] = None) -> "Refusal":
        made = super().__new__(cls, reason)
        made.kind, made.name, made.node, made.root, made.fallback = kind, name, node, root, fallback
        return made

    @property
    def reason(self) -> str:
        return str(self)

    def planned(self, fallback: "Fallback") -> "Refusal":
        """This refusal with ``fallback`` as its plan unless it has one of its own."""
        return self if self.fallback is not None else \
            Refusal(self.kind, self, self.name, node=self.node, root=self.root, fallback=fallback)

    def __reduce__(self):
        return _rebuilt, (self.kind, str(self), self.name, self.fallback)


def _rebuilt(kind, reason, name, fallback):  # nodes do not cross processes
    return Refusal(kind, reason, name, fallback=fallback)


def blocked(node, reason: str, fallback: "Fallback", root=None) -> Refusal:
    """The code around ``node`` computes something the kernel does not: reported with ``fallback``."""
    return Refusal(RefusalKind.FORM, reason, node=node, root=root, fallback=fallback)


def unavailable(reason: str) -> Refusal:
    return Refusal(RefusalKind.OPERAND, reason)


def unplaced(reason: str) -> Refusal:
    return Refusal(RefusalKind.PLACE, reason)


def unbound(reason: str) -> Refusal:
    return Refusal(RefusalKind.OUTPUT, reason)

