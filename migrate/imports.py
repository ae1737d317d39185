"""Adding the imports that fixes need (``import torch_npu``, the vendored helper module).

A module vendored beside the migrated file (the helper) is imported so that it resolves however
the file is loaded::

    try:
        from .npu_glue import npu_glue
    except ImportError:  # not loaded as part of a package
        import npu_glue

The relative import serves a package, a PEP 420 namespace sub-package (a folder without
``__init__.py`` imported as ``pkg.modules.layers``), a ``src/`` layout and transformers' remote-code
loader (which copies the files a modeling file imports in that form and skips imports inside
``try``); the absolute one a file run as ``python path/to/file.py`` (its folder is ``sys.path[0]``)
or imported from its own folder on ``sys.path``. A file imported both ways gets the helper each way.
Which of these applies is decided where the file is loaded, not by guessing the layout here.

Placement follows libcst's AddImportsVisitor (after the first block of imports at the top of the
module, below a docstring), but without its cost: AddImportsVisitor gathers every import of the
file with a full traversal and rebuilds the whole tree, about 8x the parse of the file (measured
on fixtures/models/llama_gqa). Here only the module's top-level statement list is touched, and
"already imported" is answered by the NameResolver that the rules used.
"""

from __future__ import annotations

from typing import Iterable, List

import libcst as cst
import libcst.matchers as m

from npu_migrate.migrate.helpers import BESIDE
from npu_migrate.migrate.names import NameResolver
from npu_migrate.migrate.edits import ImportSpec


def _statement(spec: ImportSpec) -> cst.BaseStatement:
    alias = f" as {spec.asname}" if spec.asname else ""
    if spec.beside:
        return cst.parse_statement(BESIDE.format(spec.module))
    if spec.obj is None:
        return cst.parse_statement(f"import {spec.module}{alias}\n")
    return cst.parse_statement(f"from {spec.module} import {spec.obj}{alias}\n")


def _present(spec: ImportSpec, names: NameResolver, top_level_code: set) -> bool:
    if spec.beside:  # this form, or one an earlier version wrote (the name bound at the top level)
        return spec.module in names.imports or any(
            f"from .{spec.module} import {spec.module}" == c or f"from . import {spec.module}" == c for c in top_level_code)
    if not spec.module.startswith(".") and spec.obj is None and spec.asname is None:
        head = spec.module.split(".")[0]
        if head in names.imports.get(head, ()):
            return True
    local = spec.asname or spec.obj
    if not spec.module.startswith(".") and spec.obj is not None and f"{spec.module}.{spec.obj}" in names.imports.get(local, ()):
        return True
    return cst.Module([_statement(spec)]).code.strip() in top_level_code


def _is_docstring(statement: cst.CSTNode) -> bool:
    return m.matches(statement, m.SimpleStatementLine(body=[m.Expr(m.SimpleString() | m.ConcatenatedString())]))


def add_imports(module: cst.Module, specs: Iterable[ImportSpec], names: NameResolver) -> cst.Module:
    """``module`` with each import of ``specs`` that it lacks added after its leading import block."""
    body = list(module.body)
    top_level_code = {module.code_for_node(s).strip() for s in body if isinstance(s, cst.SimpleStatementLine)}
    missing: List[cst.BaseStatement] = [
        _statement(spec) for spec in dict.fromkeys(specs) if not _present(spec, names, top_level_code)
    ]
    if not missing:
        return module
    start = 1 if body and _is_docstring(body[0]) else 0
    at = start
    for statement in body[start:]:
        if not m.matches(statement, m.SimpleStatementLine(body=[m.Import() | m.ImportFrom()])):
            break
        at += 1
    rest = body[at:]
    if at == start and rest and not rest[0].leading_lines:
        rest[0] = rest[0].with_changes(leading_lines=(cst.EmptyLine(),))
    return module.with_changes(body=[*body[:at], *missing, *rest])
