"""The ops of the dataflow view are ``Op`` members: a misspelt op fails loudly where it is written.

At run time ``Value`` refuses an op that is not declared; in the source, every op a matcher names
(compared with ``.op``, asked with ``is_``, given to ``Value``/``derived``/``peel``/``values``)
is written as a member, never as text that could silently match nothing."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from npu_migrate.migrate.view import Value
from npu_migrate.migrate.view.ops import BY_TEXT, Op
from npu_migrate.migrate.view.values import derived

ROOT = Path(__file__).resolve().parents[2]
MATCHING = [*(ROOT / "migrate" / "view").glob("*.py"), *(ROOT / "migrate" / "rules").rglob("*.py"),
            ROOT / "migrate" / "residual.py"]
NAMING_CALLS = {"Value": 0, "_make": 0, "derived": 1, "peel": 1}  # the op's positional argument


def test_a_value_refuses_an_undeclared_op():
    with pytest.raises(ValueError, match="unknown op 'squar'"):
        Value("squar")
    with pytest.raises(AttributeError):
        Op.SQUAR  # noqa: B018 (the typo itself is the test)
    square = Value("square")
    assert square.op is Op.SQUARE  # the text is taken and the member kept
    with pytest.raises(ValueError):
        derived(square, "rsqrtt", {"input": square})


def test_an_op_is_its_text():
    assert Op.MATMUL == "matmul" and hash(Op.MATMUL) == hash("matmul")
    assert f"{Op.TRANSPOSED}" == str(Op.TRANSPOSED) == "transposed"
    assert {"topk": 1}[Op.TOPK] == 1 and BY_TEXT["t"] is Op.T


def _texts(node: ast.AST):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node
    elif isinstance(node, (ast.Tuple, ast.Set, ast.List)):
        for element in node.elts:
            yield from _texts(element)
    elif isinstance(node, ast.IfExp):
        yield from _texts(node.body)
        yield from _texts(node.orelse)


def ops_named_as_text(path: Path):
    """(line, text) of each op written as a string where a matcher names an op."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        named = []
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "op" for s in sides):
                named = sides
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in NAMING_CALLS and len(node.args) > NAMING_CALLS[name]:
                named = [node.args[NAMING_CALLS[name]]]
            elif name in ("is_", "values"):
                named = list(node.args)
        for side in named:
            for text in _texts(side):
                yield text.lineno, text.value


def test_matchers_name_ops_as_members():
    found = {f"{path.relative_to(ROOT)}:{line}": text for path in MATCHING for line, text in ops_named_as_text(path)}
    assert found == {}


def test_the_check_sees_an_op_written_as_text(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f(v):\n    return v.op == 'squar' or v.is_(Op.ADD, 'sub')\n")
    assert list(ops_named_as_text(probe)) == [(2, "squar"), (2, "sub")]
