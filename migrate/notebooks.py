"""Jupyter notebooks (``.ipynb``): their code cells migrated like one file, the rest untouched.

The code cells are joined into one module, in order, each followed by a separator statement
(``__npu_migrate_cell__(N)``), so that names imported in one cell resolve in the next and the
imports a rewrite needs go into the first cell's import block. IPython syntax that is not Python
stands in as a placeholder comment at the same indentation and comes back as it was: line magics
and shell lines (``%matplotlib inline``, ``!pip install x``, ``files = !ls``, ``x?``); a cell that
starts with a cell magic whose body is Python (``%%time``, ``%%timeit``, ``%%capture``, ``%%prun``)
keeps its first line as a placeholder, and any other cell magic (``%%bash``, ``%%writefile``...)
leaves its cell out of the module.

The migrated module is split at the separators and only the ``source`` of a changed code cell is
replaced in the notebook's text: outputs, execution counts, metadata and the JSON's own layout stay
byte for byte, so the notebook stays valid nbformat and its diff shows only the changed lines.
Findings are located by cell (1-based among all the notebook's cells, as editors number them) and
line in that cell. A notebook that is not valid JSON, is not nbformat 4, or whose cells cannot be
put back together is reported as the file's error (left as it is), never silently copied.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from npu_migrate.migrate import diagnostics
from npu_migrate.migrate.findings import FileResult

CELL = "__npu_migrate_cell__"
MAGIC = "__npu_migrate_magic__"
PYTHON_CELL_MAGICS = {"%%time", "%%timeit", "%%capture", "%%prun"}
_SEPARATOR = re.compile(rf"^{CELL}\((\d+)\)$")
_PLACEHOLDER = re.compile(rf"^(\s*)# {MAGIC}\((\d+)\)\s*$")
_IPYTHON_LINE = re.compile(r"^\s*(?:[%!]|[\w.]+\s*=\s*[%!])|^[^#]*\?\s*$")
_WS = re.compile(r"[ \t\n\r]*")
_decoder = json.JSONDecoder()


class NotebookError(ValueError):
    """A notebook that cannot be migrated; ``line`` is the JSON text's line when known."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line


@dataclass
class Cell:
    number: int  # 1-based among all cells
    source: str
    span: Tuple[int, int]  # of the "source" value in the notebook's text
    as_list: bool  # the source was a list of lines (nbformat's usual form), else one string


@dataclass
class Notebook:
    text: str
    cells: List[Cell] = field(default_factory=list)  # the code cells
    magics: List[str] = field(default_factory=list)  # the IPython lines held by placeholders
    left_out: set = field(default_factory=set)  # cells whose cell magic's body is not Python


def _skip(text: str, at: int) -> int:
    return _WS.match(text, at).end()


def _members(text: str, at: int):
    """(key, value start, value end) of each member of the JSON object starting at ``at``."""
    at = _skip(text, at + 1)
    if text[at] == "}":
        return
    while True:
        key, at = json.decoder.scanstring(text, at + 1)
        at = _skip(text, _skip(text, at) + 1)  # past the colon
        _, end = _decoder.raw_decode(text, at)
        yield key, at, end
        at = _skip(text, end)
        if text[at] != ",":
            return
        at = _skip(text, at + 1)


def read(data: bytes) -> Notebook:
    """The notebook's code cells with where their sources are in its text."""
    try:
        text = data.decode("utf-8")
        whole = json.loads(text)
    except UnicodeDecodeError as exc:
        raise NotebookError(f"not UTF-8 text (byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise NotebookError(f"not valid JSON ({exc.msg}, line {exc.lineno} of the file)", exc.lineno) from exc
    if not isinstance(whole, dict) or not isinstance(whole.get("cells"), list):
        version = whole.get("nbformat") if isinstance(whole, dict) else None
        raise NotebookError(f"not an nbformat 4 notebook (nbformat {version!r}, no 'cells' list); convert it with "
                            "`jupyter nbconvert --to notebook` first")
    notebook = Notebook(text)
    start = _skip(text, 0)
    for key, begin, end in _members(text, start):
        if key != "cells":
            continue
        at = _skip(text, begin + 1)
        number = 0
        while text[at] != "]":
            number += 1
            cell_type, source = None, None
            for cell_key, value_begin, value_end in _members(text, at):
                if cell_key == "cell_type":
                    cell_type = json.loads(text[value_begin:value_end])
                elif cell_key == "source":
                    source = (value_begin, value_end)
            _, at = _decoder.raw_decode(text, at)
            if cell_type == "code" and source is not None:
                value = json.loads(text[source[0]:source[1]])
                if isinstance(value, list) and all(isinstance(v, str) for v in value):
                    notebook.cells.append(Cell(number, "".join(value), source, True))
                elif isinstance(value, str):
                    notebook.cells.append(Cell(number, value, source, False))
                else:
                    raise NotebookError(f"cell {number}: its source is neither text nor a list of lines")
            at = _skip(text, at)
            if text[at] == ",":
                at = _skip(text, at + 1)
    return notebook


def python_source(notebook: Notebook) -> Tuple[str, List[Tuple[int, int]]]:
    """The code cells as one module, and for each of its lines (index = line - 1) the (cell, line in
    the cell) it comes from ((cell, 0) for a separator)."""
    lines: List[str] = []
    where: List[Tuple[int, int]] = []
    for cell in notebook.cells:
        own = cell.source.split("\n")
        if own and own[-1] == "":
            own.pop()
        python = True
        state = _Continuation()
        for index, line in enumerate(own):
            if index == 0 and line.startswith("%%"):
                python = line.split()[0] in PYTHON_CELL_MAGICS
            if not python:
                notebook.left_out.add(cell.number)
                break
            if (index == 0 and line.startswith("%%")) or (state.at_statement and _IPYTHON_LINE.match(line)):
                indent = line[:len(line) - len(line.lstrip())]
                lines.append(f"{indent}# {MAGIC}({len(notebook.magics)})")
                notebook.magics.append(line.strip())
            else:
                lines.append(line)
                state.read(line)
            where.append((cell.number, index + 1))
        lines.append(f"{CELL}({cell.number})")
        where.append((cell.number, 0))
    return "".join(line + "\n" for line in lines), where


class _Continuation:
    """Whether the next line starts a statement: not inside brackets, a string over several lines
    or after a backslash (there ``% x`` is Python's operator, not a magic)."""

    _TOKEN = re.compile(r"\"\"\"|\'\'\'|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'|#.*|[()\[\]{}]")

    def __init__(self) -> None:
        self.depth = 0
        self.quote: Optional[str] = None  # the triple quote of an open string
        self.backslash = False

    @property
    def at_statement(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.backslash

    def read(self, line: str) -> None:
        for token in self._TOKEN.findall(line):
            if self.quote is not None:
                if token == self.quote:
                    self.quote = None
            elif token in ('"""', "\'\'\'"):
                self.quote = token
            elif token in "([{" and len(token) == 1:
                self.depth += 1
            elif token in ")]}" and len(token) == 1:
                self.depth = max(0, self.depth - 1)
        self.backslash = self.quote is None and line.rstrip().endswith("\\") and not line.lstrip().startswith("#")


def _cells_of(migrated: str, notebook: Notebook) -> Dict[int, str]:
    """The migrated module split back into cells (their sources, magics restored)."""
    found: Dict[int, List[str]] = {}
    current: List[str] = []
    order = []
    for line in migrated.split("\n")[:-1] if migrated.endswith("\n") else migrated.split("\n"):
        match = _SEPARATOR.match(line)
        if match:
            order.append(int(match.group(1)))
            found[int(match.group(1))] = current
            current = []
        else:
            current.append(line)
    if order != [c.number for c in notebook.cells] or any(line.strip() for line in current):
        raise NotebookError("the migrated cells could not be told apart again")
    seen = set()
    out = {}
    for cell in notebook.cells:
        if cell.number in notebook.left_out:
            out[cell.number] = cell.source
            continue
        restored = []
        for line in found[cell.number]:
            match = _PLACEHOLDER.match(line)
            if match:
                index = int(match.group(2))
                if index in seen or index >= len(notebook.magics):
                    raise NotebookError("an IPython line could not be put back")
                seen.add(index)
                restored.append(match.group(1) + notebook.magics[index])
            elif MAGIC in line:
                raise NotebookError("an IPython line was moved by a rewrite")
            else:
                restored.append(line)
        if not restored and not cell.source.strip():
            out[cell.number] = cell.source
            continue
        keep = _trailing_blanks(cell.source.split("\n")[:-1] if cell.source.endswith("\n") else cell.source.split("\n"))
        while len(restored) > 1 and _trailing_blanks(restored) > keep:
            restored.pop()  # the blank line an import block gets before the next cell's separator
        text = "\n".join(restored)
        out[cell.number] = text + ("\n" if cell.source.endswith("\n") else "")
    if len(seen) != len(notebook.magics):
        raise NotebookError("an IPython line went missing")
    return out


def _trailing_blanks(lines: List[str]) -> int:
    count = 0
    for line in reversed(lines):
        if line.strip():
            break
        count += 1
    return count


def _serialised(cell: Cell, source: str, old: str, ascii_only: bool) -> str:
    """The new ``source`` value in the layout of the old one."""
    if not cell.as_list:
        return json.dumps(source, ensure_ascii=ascii_only)
    lines = source.splitlines(keepends=True)
    items = [json.dumps(line, ensure_ascii=ascii_only) for line in lines]
    if "\n" not in old or not items:
        return "[" + ", ".join(items) + "]"
    item_indent = re.match(r"\[\s*?\n([ \t]*)", old)
    close_indent = re.search(r"\n([ \t]*)\]$", old)
    pad = item_indent.group(1) if item_indent else " "
    end = close_indent.group(1) if close_indent else ""
    return "[\n" + ",\n".join(pad + item for item in items) + "\n" + end + "]"


def rebuild(notebook: Notebook, migrated: str) -> str:
    """The notebook's text with the changed code cells' sources replaced."""
    sources = _cells_of(migrated, notebook)
    ascii_only = notebook.text.isascii()
    text = notebook.text
    for cell in sorted(notebook.cells, key=lambda c: -c.span[0]):  # from the end: spans stay valid
        new = sources[cell.number]
        if new == cell.source:
            continue
        begin, end = cell.span
        text = text[:begin] + _serialised(cell, new, text[begin:end], ascii_only) + text[end:]
    return text


def migrate(engine_migrate: Callable[[str, bytes], FileResult], path: str, data: bytes,
            error: Callable[..., FileResult]) -> FileResult:
    """The notebook's result: its code cells migrated by ``engine_migrate`` (the engine on one module),
    findings located by cell; ``error`` makes an error result (``engine.error_result``)."""
    try:
        notebook = read(data)
    except NotebookError as exc:
        return error(path, diagnostics.PARSE_ERROR, f"notebook cannot be migrated: {exc}", exc.line)
    source, where = python_source(notebook)
    result = engine_migrate(path, source.encode("utf-8"))
    result.path = path

    def place(line: int) -> Tuple[Optional[int], int]:
        return where[line - 1] if 0 < line <= len(where) else (None, line)

    for finding in result.findings:
        if finding.line:
            finding.cell, finding.line = place(finding.line)
    if result.status == "error":
        finding = result.findings[0] if result.findings else None
        if finding is not None and finding.cell is not None:
            result.error = f"{path}:cell {finding.cell}:{finding.line}:{finding.col + 1}: {finding.code} {finding.message}"
        return result
    if result.status != "changed":
        result.original = result.migrated = None
        return result
    try:
        rebuilt = rebuild(notebook, result.migrated)
    except NotebookError as exc:
        return error(path, diagnostics.OUTPUT_INVALID, f"notebook left unchanged: {exc}")
    result.original, result.migrated = notebook.text, rebuilt
    return result
