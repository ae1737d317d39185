"""The layering of the package, derived from its imports (``ast``, every import statement, the
function-local ones included; only ``if TYPE_CHECKING:`` blocks are left out, they never run).

* No import loop between modules, and none between floors (a floor: a top-level module of
  ``migrate/`` or one of its packages, ``view``, ``rules``, ``outputs``, ...).
* The floors of the rewriting side import only downwards, in the order of ``FLOORS``.
* The rule families are side by side: no family imports another (what they share is below them).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path
from typing import Dict, Iterator, List, Set
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"migrate": "npu_migrate.migrate", "opmap": "npu_migrate.opmap"}
TOP = "npu_migrate.migrate"

#: The floors of the rewriting side, lowest first: each imports only floors listed before it.
FLOORS = ("tree", "refusal", "edits", "defuse", "guarded", "view", "context", "rules", "residual", "catalogue",
          "engine", "diffs", "runner", "outputs", "cli")
FAMILIES = ("device", "unsupported", "attention", "rotary", "norm", "mlp", "router")


def modules() -> Dict[str, Path]:
    found = {}
    for folder, dotted in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([dotted, *parts])] = path
    return found


def _runtime_imports(node: ast.AST) -> Iterator[ast.stmt]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and getattr(child.test, "id", getattr(child.test, "attr", None)) == "TYPE_CHECKING":
            yield from (n for n in child.orelse for n in _runtime_imports_of(n))
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        else:
            yield from _runtime_imports(child)


def _runtime_imports_of(node: ast.AST) -> Iterator[ast.stmt]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _runtime_imports(node)


def import_graph() -> Dict[str, Set[str]]:
    """module -> the modules of the package it imports (a ``from pkg import name`` that names a
    submodule is an edge to the submodule, else to ``pkg``)."""
    found = modules()
    graph: Dict[str, Set[str]] = defaultdict(set)
    for module, path in found.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in found else base for a in node.names]
            for target in targets:
                while target and target not in found:
                    target = target.rpartition(".")[0]
                if target and target != module and not module.startswith(target + "."):
                    graph[module].add(target)
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(set(graph) | {n for targets in graph.values() for n in targets}):
        if node not in index:
            visit(node)
    return found


def floor(module: str) -> str:
    """``npu_migrate.migrate.view.build`` -> ``view``; ``npu_migrate.opmap.table`` -> ``opmap``."""
    if module == TOP or not module.startswith(TOP + "."):
        return module.split(".")[1]
    return module[len(TOP) + 1:].split(".")[0]


def floor_graph(graph: Dict[str, Set[str]]) -> Dict[str, Set[str]]:
    out: Dict[str, Set[str]] = defaultdict(set)
    for module, targets in graph.items():
        for target in targets:
            if floor(module) != floor(target) and target != TOP:
                out[floor(module)].add(floor(target))
    return out


@pytest.mark.slow
def test_no_module_imports_in_a_loop():
    assert cycles(import_graph()) == []


@pytest.mark.slow
def test_no_floor_imports_in_a_loop():
    assert cycles(floor_graph(import_graph())) == []


@pytest.mark.slow
def test_the_rewriting_floors_import_only_downwards():
    upward = sorted((a, b) for a, targets in floor_graph(import_graph()).items() for b in targets
                    if a in FLOORS and b in FLOORS and FLOORS.index(b) > FLOORS.index(a))
    assert upward == []


@pytest.mark.slow
def test_the_view_imports_no_rule_and_the_rules_no_driver():
    graph = floor_graph(import_graph())
    assert not graph["view"] & {"rules", "context", "residual", "engine", "runner", "outputs", "cli"}
    assert not graph["rules"] & {"residual", "catalogue", "engine", "runner", "outputs", "cli"}


@pytest.mark.slow
def test_rule_families_import_no_other_family():
    crossing = []
    for module, targets in import_graph().items():
        parts = module.split(".")
        if parts[2:3] != ["rules"] or len(parts) < 4 or parts[3] not in FAMILIES:
            continue
        for target in targets:
            other = target.split(".")
            if other[2:3] == ["rules"] and len(other) > 3 and other[3] in FAMILIES and other[3] != parts[3]:
                crossing.append((module, target))
    assert crossing == []


def test_the_derivation_sees_loops_and_back_edges():
    """The checks above can fail: a loop and an upward import made up here are found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    made_up = {f"{TOP}.view.build": {f"{TOP}.rules.base"}, f"{TOP}.rules.base": {f"{TOP}.view.values"}}
    assert floor_graph(made_up) == {"view": {"rules"}, "rules": {"view"}}
    assert cycles(floor_graph(made_up)) == [["rules", "view"]]


def test_every_floor_is_a_folder_or_module():
    """``FLOORS`` and ``FAMILIES`` name what is on disk (a renamed floor fails here, not silently)."""
    for name in FLOORS:
        assert (ROOT / "migrate" / name).is_dir() or (ROOT / "migrate" / f"{name}.py").is_file(), name
    for name in FAMILIES:
        assert (ROOT / "migrate" / "rules" / name / "__init__.py").is_file(), name
