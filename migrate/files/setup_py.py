"""``setup.py``: the literal dependency lists of its ``setup(...)`` call (``install_requires``,
``setup_requires``, ``tests_require``, ``extras_require``), written inline or bound to a module-level
name (``REQUIRED = [...]``), and the literal strings the module adds to such a name
(``install_requires.append("nvidia-ml-py")``: read and reported, never edited). Lists read from a
file are not declarations here; the files they read are scanned on their own. The Python rules migrate the
file's code; ``migrate.files.run`` merges the two.
"""

from __future__ import annotations

import ast
from typing import Dict, Iterator, List, Optional, Tuple

from npu_migrate.migrate.files.base import FileKind, FileSyntaxError, Scan
from npu_migrate.migrate.files.declared import Declared, declared, list_sibling
from npu_migrate.migrate.files.packages import check_packages

_KEYWORDS = {"install_requires": "install_requires", "setup_requires": "build-system",
             "tests_require": "tests_require"}


class _Offsets:
    """ast positions (1-based lines, UTF-8 byte columns) as character offsets."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def __call__(self, line: int, col: int) -> int:
        return self.starts[line - 1] + len(self.lines[line - 1].encode("utf-8")[:col].decode("utf-8", "replace"))


def _literal_lists(tree: ast.Module) -> Dict[str, ast.AST]:
    """Module-level ``NAME = [...]`` / ``(...)`` / ``{...}`` bindings."""
    bound = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, (ast.List, ast.Tuple, ast.Dict)):
            bound[node.targets[0].id] = node.value
    return bound


def _setup_calls(tree: ast.Module) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name == "setup":
                yield node


def _added(tree: ast.Module, names: Dict[str, str]) -> Iterator[Tuple[str, ast.Constant]]:
    """Literal strings a module adds to a list that setup() reads: ``NAME.append("x")``,
    ``NAME.extend([...])``, ``NAME += [...]`` (``names``: the list's name -> its group)."""
    for node in ast.walk(tree):
        target, values = None, []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.attr in ("append", "extend") and node.args:
            target = node.func.value.id
            arg = node.args[0]
            values = [arg] if node.func.attr == "append" else getattr(arg, "elts", [])
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and isinstance(node.op, ast.Add) \
                and isinstance(node.value, (ast.List, ast.Tuple)):
            target, values = node.target.id, node.value.elts
        if target in names:
            for value in values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    yield names[target], value


def _names(call: ast.Call) -> Dict[str, str]:
    """The names setup() reads its dependency lists from -> their group."""
    return {keyword.value.id: _KEYWORDS[keyword.arg] for keyword in call.keywords
            if keyword.arg in _KEYWORDS and isinstance(keyword.value, ast.Name)}


def _lists(call: ast.Call, bound: Dict[str, ast.AST]) -> Iterator[Tuple[str, ast.AST]]:
    for keyword in call.keywords:
        value = bound.get(keyword.value.id, keyword.value) if isinstance(keyword.value, ast.Name) else keyword.value
        if keyword.arg in _KEYWORDS and isinstance(value, (ast.List, ast.Tuple)):
            yield _KEYWORDS[keyword.arg], value
        elif keyword.arg == "extras_require" and isinstance(value, ast.Dict):
            for key, item in zip(value.keys, value.values):
                item = bound.get(item.id, item) if isinstance(item, ast.Name) else item
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(item, (ast.List, ast.Tuple)):
                    yield f"extras_require.{key.value}", item


class SetupPy(FileKind):
    name = "setup.py"
    language = "python"
    declares_packages = True

    def matches(self, path: str, head: bytes = b"") -> bool:
        return False  # a Python file: migrate.files.run scans it after the Python rules

    def problem(self, text: str, path: str = "") -> Optional[str]:
        try:
            ast.parse(text)
        except SyntaxError as exc:
            return f"not valid Python: {exc.msg} (line {exc.lineno})"
        return None

    def scan(self, scan: Scan) -> None:
        try:
            tree = ast.parse(scan.text)
        except SyntaxError as exc:
            raise FileSyntaxError(exc.lineno or 1, f"does not parse as Python: {exc.msg}") from None
        offset = _Offsets(scan.text)
        bound = _literal_lists(tree)
        found: List[Declared] = []
        seen = set()
        for call in _setup_calls(tree):
            for group, node in _lists(call, bound):
                if id(node) in seen:
                    continue
                seen.add(id(node))
                for element in node.elts:
                    if isinstance(element, ast.Constant) and isinstance(element.value, str):
                        start = offset(element.lineno, element.col_offset)
                        end = offset(element.end_lineno, element.end_col_offset)
                        quote = scan.text[start] if scan.text[start] in "\"'" else '"'
                        item = declared(element.value, start, group, list_sibling(scan.text, start, end, quote))
                        if item is not None:
                            found.append(item)
            for group, element in _added(tree, _names(call)):  # read, never edited: the list is built at run time
                item = declared(element.value, offset(element.lineno, element.col_offset), group)
                if item is not None:
                    found.append(item)
        check_packages(scan, found)
