"""Generated code means what its template says, whatever expression lands in it (``migrate.parens``).

The templates are not listed by hand: every ``Code`` the rules emit while migrating every Python file
under ``fixtures/`` is collected from the sites the engine applies. Two paths put an expression into
a template, and each is tested with low-precedence expressions (binary operators, comparisons,
``not``, ``and``/``or``, conditional expressions, lambdas, ``await``, walrus, starred where Python
allows it):

* a hole filled with a node: every hole of every template gets each expression; CPython must read
  the generated code as the template's tree with the expression in the hole, and compile it;
* operand source pasted into a template's text: the migration runs again with every pasted text
  replaced by a low-precedence expression around it; each must land whole in the output.

The migrated code must also run: the fused rules' emulator tests (tests/rules/test_*_rules.py, the
"low precedence" spelling of tests/rules/emulated.py) execute their cases again with every pasted
operand ``x if True else x`` against the originals, and fixture NPU302_eager_scaled_query holds the
issue's ``torch.matmul(q / math.sqrt(d), ...)``, executed in tests/rules/test_attention_rules.py.
"""

from __future__ import annotations

import ast
import copy
import sys
from pathlib import Path

import libcst as cst
import pytest

from npu_migrate.migrate import parens
from npu_migrate.migrate.apply import Apply
from npu_migrate.migrate.codegen import code as codegen
from npu_migrate.migrate.edits import Guarded, Replace, edit_codes
from npu_migrate.migrate.engine import build_engine
from npu_migrate.migrate.guarded import _placeholder, _text, fill
from tests.snippets import builtin_table

ROOT = Path(__file__).parents[2]
FILES = sorted(p for p in (ROOT / "fixtures").rglob("*.py"))
TABLE = builtin_table()
FUSED = ("NPU302", "NPU310", "NPU320", "NPU330", "NPU340")  # the rules that write operand source into code

#: low-precedence expressions; ``{i}`` makes the names of each use unique
LOW = {
    "minus": "__a{i} - __b{i}",
    "bit_or": "__a{i} | __b{i}",
    "power": "__a{i} ** __b{i}",
    "negative": "-__a{i}",
    "number": "1",
    "comparison": "__a{i} < __b{i}",
    "not": "not __a{i}",
    "or": "__a{i} or __b{i}",
    "conditional": "__a{i} if __b{i} else __c{i}",
    "lambda": "lambda __x{i}: __x{i}",
    "await": "await __a{i}",
    "walrus": "__w{i} := __a{i}",
    "starred": "*__a{i}",
}


def _migrate_recording(path: Path, engine):
    """The engine's result for ``path`` and the sites it applied."""
    applied = []
    real = Apply.__init__

    def recording(self, sites, tree):
        sites = list(sites)
        applied.extend(sites)
        real(self, sites, tree)

    Apply.__init__ = recording
    try:
        result = engine.migrate(path.name, path.read_bytes())
    finally:
        Apply.__init__ = real
    return result, applied


@pytest.fixture(scope="module")
def emitted():
    """(templates, files): (file, Code, kind) for every template the rules emit over the fixtures,
    and the files where a fused rule pasted operand source."""
    engine = build_engine(TABLE)
    found, seen, pasting = [], set(), []
    for path in FILES:
        _, sites = _migrate_recording(path, engine)
        if any(s.edits and s.finding.code in FUSED for s in sites):
            pasting.append(path)
        for site in sites:
            for edit in site.edits:
                kinds = {id(c): "statement" for c in edit_codes(edit)}
                if isinstance(edit, Guarded):
                    kinds[id(edit.guard)] = "expression"
                elif isinstance(edit, Replace) and isinstance(edit.node, cst.BaseExpression):
                    kinds[id(edit.new)] = "expression"
                for c in edit_codes(edit):
                    key = (c.text, kinds[id(c)])
                    if c.holes and key not in seen:
                        seen.add(key)
                        found.append((path.relative_to(ROOT).as_posix(), c, kinds[id(c)]))
    return found, pasting


def _dump(text: str, kind: str) -> str:
    return ast.dump(ast.parse(text, mode="eval" if kind == "expression" else "exec"))


class _Put(ast.NodeTransformer):
    """The template's tree with each placeholder replaced by its expression's tree."""

    def __init__(self, trees):
        self.trees = trees

    def visit_Name(self, node):
        tree = self.trees.get(node.id)
        return copy.deepcopy(tree) if tree is not None else node


def _positions(template: ast.AST, placeholder: str):
    """Where a placeholder stands: "star" (a call's positional argument or a display's element,
    where ``*x`` is allowed), "store" (an assignment target) or "load"."""
    for node in ast.walk(template):
        items = node.args if isinstance(node, ast.Call) else node.elts if isinstance(
            node, (ast.List, ast.Tuple, ast.Set)) else ()
        for item in items:
            if isinstance(item, ast.Name) and item.id == placeholder:
                return "store" if not isinstance(item.ctx, ast.Load) else "star"
        if isinstance(node, ast.Name) and node.id == placeholder and not isinstance(node.ctx, ast.Load):
            return "store"
    return "load"


@pytest.mark.slow
def test_the_templates_are_found_over_the_fixtures(emitted):
    templates, pasting = emitted
    assert len(templates) >= 20 and len(pasting) >= 10, (len(templates), len(pasting))
    assert {kind for _, _, kind in templates} == {"expression", "statement"}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LOW))
def test_every_hole_of_every_template_keeps_its_expression_whole(name, emitted):
    """Each hole of each template filled with the expression: the code parses as intended and compiles."""
    checked = 0
    for where, source, kind in emitted[0]:
        mode = "eval" if kind == "expression" else "exec"
        template_text = _text(source)
        template = ast.parse(template_text, mode=mode)
        values, trees = {}, {}
        for index, (hole, node) in enumerate(source.holes):
            placeholder = _placeholder(hole)
            position = _positions(template, placeholder)
            text = LOW[name].format(i=index)
            if position == "store" or (name == "starred" and position != "star"):
                text = f"__kept{index}"  # an assignment target is a name; ``*x`` only where Python takes it
            if text.startswith("*"):
                values[id(node)] = cst.StarredElement(cst.parse_expression(text[1:]))
                trees[placeholder] = ast.Starred(ast.parse(text[1:], mode="eval").body, ast.Load())
            else:
                values[id(node)] = parens.bare(cst.parse_expression(f"({text})"))
                trees[placeholder] = ast.parse(f"({text})", mode="eval").body
        if all(isinstance(v, cst.Name) for v in values.values()):
            continue
        generated = codegen(cst.Module(body=[]), fill(source, kind, lambda node: values[id(node)]))
        intended = _Put(trees).visit(template)
        assert _dump(generated, kind) == ast.dump(intended), f"{where}: {source.text!r} with {name}:\n{generated}"
        body = generated if kind == "statement" else f"__r = {generated}\n"
        compile("async def __f():\n" + "".join(f"    {line}\n" for line in body.splitlines()), where, "exec")
        checked += 1
    assert checked, f"no template has a hole where {name} may stand"


# -- operand source pasted into templates -----------------------------------------------------------
PASTED = {
    "conditional": "{t} if __probe{i} else {t}",
    "comparison": "{t} < __probe{i}",
    "not": "not __probe{i} or {t}",
    "minus": "{t} - __probe{i}",
    "lambda": "lambda __probe{i}: {t}",
}


def _with_pasted(monkeypatch, pattern):
    """Every text pasted into a template (what ``parens.atom`` receives, in every module that imports
    it) becomes ``pattern`` around it; returns {probe name: the expression's tree}."""
    probes, memo = {}, {}
    real = parens.atom

    def pasted(text):
        if text not in memo:
            i = len(memo)
            memo[text] = pattern.format(t=f"({text})" if not parens.is_atom(cst.parse_expression(text)) else text, i=i)
            probes[f"__probe{i}"] = ast.dump(ast.parse(memo[text], mode="eval").body)
        return real(memo[text])

    for module in list(sys.modules.values()):
        if getattr(module, "atom", None) is real and module.__name__.startswith("npu_migrate."):
            monkeypatch.setattr(module, "atom", pasted)
    return probes


def _landed_whole(tree: ast.AST, probes) -> list:
    """The probe names of ``tree`` that are not inside a whole pasted expression."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.expr) and ast.dump(node) in probes.values():
            inside.update(id(n) for n in ast.walk(node))
    return [name for node in ast.walk(tree) if id(node) not in inside
            for name in [getattr(node, "id", None) or getattr(node, "arg", None)]
            if isinstance(node, (ast.Name, ast.arg)) and name and name.startswith("__probe")]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PASTED))
def test_pasted_operands_land_whole(name, emitted, monkeypatch):
    """The fixtures migrated with every pasted operand a low-precedence expression: each lands whole
    (CPython reads it as one subtree wherever it was put), and the fused rules still paste some."""
    probes = _with_pasted(monkeypatch, PASTED[name])
    engine = build_engine(TABLE)
    landed = {}
    for path in emitted[1]:
        result, sites = _migrate_recording(path, engine)
        if result.status != "changed":
            continue
        stray = _landed_whole(ast.parse(result.migrated), probes)
        assert not stray, f"{path}: {stray[:5]} not inside their pasted expression:\n{result.migrated}"
        for site in sites:
            if site.edits and any("__probe" in c.text for e in site.edits for c in edit_codes(e)):
                landed[site.finding.code] = landed.get(site.finding.code, 0) + 1
    if name in ("conditional", "minus"):  # expressions the fused rules take as cheap operands
        assert set(FUSED) <= set(landed), landed
    else:
        assert landed, "no pasted operand reached a template"
