"""Why a rewrite is refused, as data: a ``Refusal`` is the reason a finding states (its text) with a
``kind`` and the name it is about, so that code that reacts to a refusal (``view.emit`` hoists a
binding read after a region) reads the kind, never the wording of the message. A low module: the
region checks (``defuse``) make refusals and the emitter and the rules read them."""

from __future__ import annotations

from enum import Enum
from typing import Optional


class RefusalKind(Enum):
    HOISTED_READS_EARLIER = "a hoisted statement reads what the statements before it compute"
    HOISTED_CLASH = "a hoisted statement sets a name the region also sets"
    STALE_READ = "the fused call would read a name before the original redefines it"
    EARLY_EXIT = "the region leaves early (return, break, raise or yield)"
    READ_AFTER_ORIGINAL_ONLY = "a name read after the region is defined only by the original branch"
    READ_AFTER_FUSED_ONLY = "a name read after the region is defined only by the fused branch"


class Refusal(str):
    """The reason (this string, as the finding words it), its ``kind`` and the local ``name`` it is
    about (None when it is about no one name). It is a ``str`` so that every message that quotes a
    reason keeps working; decisions read ``kind`` and ``name``."""

    kind: RefusalKind
    name: Optional[str]

    def __new__(cls, kind: RefusalKind, reason: str, name: Optional[str] = None) -> "Refusal":
        made = super().__new__(cls, reason)
        made.kind, made.name = kind, name
        return made

    def __reduce__(self):
        return Refusal, (self.kind, str(self), self.name)
