"""Migrating a snippet of source in a test: one way for every test module.

    result = migrate(source)                          # the FileResult of "snippet.py", not an error
    text = migrated(source, select=["NPU330"])        # the migrated text: changed, only NPU330 findings
    codes(result) == {"NPU330"}

The engine is the one ``migrate run`` builds (``build_engine``: ``select``/``ignore`` as on the
command line), or, given ``rules``, an ``Engine`` running exactly those rules (every code enabled
unless ``enabled`` says otherwise), over the built-in op table loaded once (``builtin_table()``) or a
table the test gives. The result's status is checked before the test reads it (``status``: one
status, several, or None for no check); ``spelling="low precedence"`` migrates with every operand
text the rules paste spelled ``x if True else x`` (``pasted_low``).

A file name that npu-migrate reads as a dependency, launcher or config file (``requirements.txt``,
``run.sh``, ``.env``, a YAML config; ``migrate.files.kinds``) is migrated by that engine
(``migrate.files.engine``) with the ``facts`` the test gives.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from functools import lru_cache
from typing import Callable, Dict, Iterable, Optional, Sequence, Set, Tuple, Type, Union

from npu_migrate.migrate.engine import Engine, build_engine
from npu_migrate.migrate.files.base import Facts
from npu_migrate.migrate.files.engine import migrate_file
from npu_migrate.migrate.files.kinds import kind_of
from npu_migrate.migrate.files.run import HEAD_BYTES
from npu_migrate.migrate.findings import FileResult
from npu_migrate.migrate.rules import code_enabled
from npu_migrate.migrate.rules.base import Rule
from npu_migrate.opmap import OpTable, load_table

NOT_AN_ERROR = ("changed", "unchanged", "skipped")

#: how the executed rewrites of the fused rules are spelled: operand text as the rule writes it, or
#: every pasted operand ``x if True else x`` (the same value, the lowest precedence a pure operand
#: has), which must land whole in every template and compute the same
SPELLINGS = ("as written", "low precedence")


@lru_cache(maxsize=1)
def builtin_table() -> OpTable:
    """The built-in op table, loaded once per test process (tests never change it)."""
    return load_table()


def engine(select: Optional[Sequence[str]] = None, ignore: Optional[Sequence[str]] = None, *,
           rules: Optional[Sequence[Type[Rule]]] = None, enabled: Optional[Callable[[str], bool]] = None,
           table: Optional[OpTable] = None) -> Engine:
    """``migrate run``'s engine for ``select``/``ignore``, or one that runs exactly ``rules``."""
    table = table if table is not None else builtin_table()
    if rules is None:
        assert enabled is None, "enabled= goes with rules=; give select=/ignore= otherwise"
        return build_engine(table, list(select) if select is not None else None,
                            list(ignore) if ignore is not None else None)
    assert select is None and ignore is None, "select=/ignore= pick the rules; give enabled= with rules="
    return Engine(table, rules, enabled or (lambda code: True))


def migrate(source: Union[str, bytes], path: str = "snippet.py", *, select: Optional[Sequence[str]] = None,
            ignore: Optional[Sequence[str]] = None, rules: Optional[Sequence[Type[Rule]]] = None,
            enabled: Optional[Callable[[str], bool]] = None, table: Optional[OpTable] = None,
            facts: Optional[Facts] = None, status: Union[None, str, Tuple[str, ...]] = NOT_AN_ERROR,
            spelling: str = "as written", using: Optional[Engine] = None) -> FileResult:
    """``source`` migrated as the file ``path``; its status checked against ``status``. ``using``:
    an engine the test built once (``engine(...)``) instead of the options."""
    data = source.encode("utf-8") if isinstance(source, str) else source
    python = path.endswith((".py", ".ipynb"))
    kind = None if python else kind_of(path, data[:HEAD_BYTES] if "." not in path.rsplit("/", 1)[-1] else b"")
    if not python:
        assert kind is not None, f"npu-migrate reads no file named {path}"
        assert rules is None and using is None and spelling == "as written", f"{path} is not Python"
        result = migrate_file(path, data, kind, table if table is not None else builtin_table(),
                              facts if facts is not None else Facts())
    else:
        assert facts is None, "facts= is for dependency, launcher and config files"
        run = using if using is not None else engine(select, ignore, rules=rules, enabled=enabled, table=table)
        with pasted_low(spelling == "low precedence"):
            result = run.migrate(path, data)
        if spelling == "low precedence" and result.status == "changed":
            assert " if True else " in result.migrated, "no operand text was pasted"
    if status is not None:
        wanted = (status,) if isinstance(status, str) else status
        assert result.status in wanted, (result.status, result.error, result.findings)
    return result


def migrated(source: Union[str, bytes], path: str = "snippet.py", *, select: Optional[Sequence[str]] = None,
             ignore: Optional[Sequence[str]] = None, **options) -> str:
    """The migrated text of ``source``, which must change; with ``select``/``ignore``, every finding
    must carry a code they enable (no tool finding, such as a rewrite that was not applied)."""
    result = migrate(source, path, select=select, ignore=ignore, status="changed", **options)
    if select is not None or ignore is not None:
        stray = [f for f in result.findings
                 if not code_enabled(f.code, list(select) if select is not None else None,
                                     list(ignore) if ignore is not None else None)]
        assert not stray, stray
    return result.migrated


def codes(result: FileResult, action: Optional[str] = None) -> Set[str]:
    """The codes of ``result``'s findings (with ``action``: of those findings only)."""
    return {f.code for f in findings(result, action=action)}


def findings(result: FileResult, codes: Iterable[str] = (), action: Optional[str] = None) -> list:
    """``result``'s findings, in order; only those with one of ``codes`` (when given) and ``action``."""
    wanted = set(codes)
    return [f for f in result.findings
            if (not wanted or f.code in wanted) and (action is None or f.action == action)]


@contextmanager
def pasted_low(active: bool = True):
    """While active, every text pasted into a template (what ``migrate.parens.atom`` receives, in
    each module that imports it) is ``text if True else text``."""
    from npu_migrate.migrate import parens

    real = parens.atom
    users = [m for name, m in list(sys.modules.items())
             if active and name.startswith("npu_migrate.") and getattr(m, "atom", None) is real]
    for module in users:
        module.atom = lambda text: real(f"{real(text)} if True else {real(text)}")
    try:
        yield
    finally:
        for module in users:
            module.atom = real



#: names a renaming keeps: what Python or a library calls by that name (``nn.Module.forward``,
#: transformers' ``_apply_gate``), so renaming them would change what the code does
KEPT_NAMES = frozenset({"forward", "_apply_gate"})


def renamed(source: str, new_name: Callable[[str, str], str]) -> Tuple[str, Dict[str, str]]:
    """``source`` with every class and function it defines renamed (``new_name(kind, old)``, kind
    "class" or "function"; dunder methods and ``KEPT_NAMES`` kept), with the references to them
    (names, and methods read through ``self``/``cls``), and the renaming {old: new}. What the code
    computes is unchanged."""
    import libcst as cst

    module = cst.parse_module(source)
    mapping: Dict[str, str] = {}
    for node in _walk_defs(module):
        old = node.name.value
        if old not in mapping and not (old.startswith("__") and old.endswith("__")) and old not in KEPT_NAMES:
            mapping[old] = new_name("class" if isinstance(node, cst.ClassDef) else "function", old)

    class _Rename(cst.CSTTransformer):
        def leave_Name(self, original, updated):
            return updated.with_changes(value=mapping[updated.value]) if updated.value in mapping else updated

        def leave_Attribute(self, original, updated):
            receiver = original.value
            if isinstance(receiver, cst.Name) and receiver.value in ("self", "cls"):
                return updated  # a method read through self: renamed with the rest
            return updated.with_changes(attr=original.attr)  # any other attribute (torch.topk) keeps its name

    return module.visit(_Rename()).code, mapping


#: two renamings of every class and function a source defines: to neutral names, and to names another
#: framework gives its routers and MLPs
RENAMINGS = {
    "neutral": lambda kind, old: f"{'Block' if kind == 'class' else 'step'}_{len(old)}_{old[::-1].strip('_')}",
    "router-named": lambda kind, old: f"{'TopKRouter' if kind == 'class' else 'route_tokens'}_{old}",
}


def same_when_renamed(source: str, path: str, select: Sequence[str], renaming: str) -> None:
    """Assert that ``source`` with its classes and functions renamed (``RENAMINGS[renaming]``) migrates
    (with ``select``) to the same findings, up to the names, and to the same output, renamed alike."""
    import re

    changed, mapping = renamed(source, RENAMINGS[renaming])
    before, after = migrate(source, path, select=select), migrate(changed, path, select=select)
    words = sorted({*mapping, *mapping.values()}, key=len, reverse=True)
    names = re.compile(r"\b(" + "|".join(map(re.escape, words)) + r")\b") if words else None

    def seen(result):  # every old or new name in a message read as one placeholder
        return [(f.line, f.col, f.code, names.sub("<name>", f.message) if names else f.message)
                for f in result.findings]

    assert seen(before) == seen(after)
    assert after.status == before.status
    if before.status == "changed":
        assert renamed(before.migrated, RENAMINGS[renaming])[0] == after.migrated


def _walk_defs(node):
    import libcst as cst

    for child in node.children:
        if isinstance(child, (cst.ClassDef, cst.FunctionDef)):
            yield child
        yield from _walk_defs(child)
