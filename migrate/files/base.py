"""What a file kind sees and produces: the file (``Scan``), the repository facts it may depend on
(``Facts``) and its sites, each a ``Finding`` placed at a character offset with the text edits that
make its rewrite (``TextEdit``, data like ``migrate.edits``: the engine applies them all in one pass).

A kind (``FileKind``) recognises its files by name and scans one file's text; it never writes, never
raises for bad input (a line it cannot read is left alone) and reports every site it cannot
rewrite exactly, with the op table's plan.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, List, Optional, Sequence, Tuple

from ..findings import Finding, Requirement
from ...opmap import Fallback

if TYPE_CHECKING:
    from ...opmap import OpTable


class FileSyntaxError(Exception):
    """The file is not valid in its own format (TOML, YAML, Python): the whole file is an NPU017 error."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line, self.message = line, message


@dataclass(frozen=True)
class Facts:
    """What the rest of the repository says that a dependency file's migration depends on."""

    imports_torch_npu: bool = False  # some (migrated) Python file imports torch_npu

    def key(self) -> str:
        """The facts as a cache-key part."""
        return f"torch_npu={int(self.imports_torch_npu)}"


@dataclass(frozen=True)
class TextEdit:
    """Replace ``text[start:end]`` with ``new`` (``start == end``: insert)."""

    start: int
    end: int
    new: str


@dataclass
class TextSite:
    finding: Finding  # its line and col are set by the engine from ``at``
    at: int  # character offset the finding points at
    edits: Tuple[TextEdit, ...] = ()


class Scan:
    """One file being scanned: its text, the op table, the facts; collects sites and requirements."""

    def __init__(self, path: str, text: str, table: OpTable, facts: Facts = Facts()) -> None:
        self.path, self.text, self.table, self.facts = path, text, table, facts
        self.sites: List[TextSite] = []
        self.requirements: List[Requirement] = []
        self._starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

    def position(self, offset: int) -> Tuple[int, int]:
        """(1-based line, 0-based column) of a character offset."""
        index = bisect.bisect_right(self._starts, offset) - 1
        return index + 1, offset - self._starts[index]

    def line(self, offset: int) -> int:
        return self.position(offset)[0]

    def line_start(self, line: int) -> int:
        """The offset where 1-based ``line`` starts (the last line's start past the end)."""
        return self._starts[min(max(line, 1), len(self._starts)) - 1]

    def report(self, at: int, code: str, message: str, fallback: Optional[Fallback], api: Optional[str] = None) -> None:
        self.sites.append(TextSite(Finding(code, message, "reported", api=api, fallback=fallback), at))

    def rewrite(self, at: int, code: str, message: str, edits: Sequence[TextEdit], target: str,
                api: Optional[str] = None) -> None:
        self.sites.append(TextSite(Finding(code, message, "rewritten", api=api, target=target), at, tuple(edits)))


class FileKind:
    """A kind of non-Python file: recognised by its path, scanned as text."""

    name: ClassVar[str]  # "requirements", "dockerfile", ... (report.json's file kind)
    language: ClassVar[str] = "text"  # the code-fence language of its examples in the doc pages
    declares_packages: ClassVar[bool] = False  # its files are always scanned (the package matrix needs them)
    triggers: ClassVar[Tuple[bytes, ...]] = ()  # else: a file is scanned only if one of these occurs
    # its files are often data (a JSON dataset, YAML that configures nothing): one without a trigger,
    # over the size limit or not UTF-8 is an other file, copied as it is (not counted as scanned)
    maybe_data: ClassVar[bool] = False

    def matches(self, path: str, head: bytes = b"") -> bool:
        """Whether ``path`` (relative, forward slashes) is a file of this kind; ``head``: its first bytes."""
        raise NotImplementedError

    def scan(self, scan: Scan) -> None:
        raise NotImplementedError

    def problem(self, text: str, path: str = "") -> Optional[str]:
        """Why a migrated text is not a valid file of this kind (None: valid, or not checkable)."""
        return None


def basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]

