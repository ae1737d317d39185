"""Every emulated op has the real torch_npu 2.14.0 signature: names, order, defaults, keyword-only."""

from __future__ import annotations

import inspect

import pytest

from npu_migrate.kernels.registry import load_all
from tests.kernels.schema import NO_DEFAULT, Arg, load_schemas, parse_default, parse_line

OPS = load_all()


@pytest.fixture(scope="module")
def schemas():
    return load_schemas()


def _same_default(expected, actual) -> bool:
    if expected is NO_DEFAULT:
        return actual is inspect.Parameter.empty
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual  # True must not pass for 1
    if isinstance(expected, list):
        return isinstance(actual, (list, tuple)) and list(actual) == expected
    if isinstance(expected, (int, float)):
        return isinstance(actual, (int, float)) and actual == expected
    return expected == actual


def _describe(arg: Arg) -> str:
    default = "" if arg.default is NO_DEFAULT else f"={arg.default!r}"
    return f"{'*, ' if arg.kw_only else ''}{arg.name}{default}"


def test_registry_is_not_empty():
    assert OPS, "load_all() registered no ops"


def test_every_torch_npu_op_of_the_op_table_is_emulated():
    """Each ``torch_npu.*`` op the op table targets or documents has an emulated kernel (which the
    two tests below then check against its schema), the MoE gating family included."""
    from tests.snippets import builtin_table

    named = set()
    for record in builtin_table().records():
        for api in (record.api, record.target or ""):
            if api.startswith("torch_npu.npu_") or api.startswith("torch_npu.fast_"):
                named.add(api.split(".", 1)[1])
    assert {"npu_moe_gating_top_k", "npu_moe_gating_top_k_softmax", "npu_moe_gating_top_k_softmax_v2"} <= named
    assert sorted(named - set(OPS)) == []


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_is_in_the_schema(name, schemas):
    assert name in schemas, f"emulated op {name} is not a torch_npu 2.14.0 op (no schema line)"


@pytest.mark.parametrize("name", sorted(OPS))
def test_signature_matches_schema(name, schemas):
    if name not in schemas:
        pytest.fail(f"{name}: no schema")
    schema = schemas[name]
    params = list(inspect.signature(OPS[name]).parameters.values())
    kinds = {p.kind for p in params}
    assert not kinds & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}, (
        f"{name}: *args/**kwargs hide the real signature"
    )
    want = [a.name for a in schema.args]
    got = [p.name for p in params]
    assert got == want, f"{name} (schema line {schema.line}): parameters {got} != schema {want}"
    for arg, param in zip(schema.args, params):
        kw_only = param.kind is inspect.Parameter.KEYWORD_ONLY
        assert kw_only == arg.kw_only, (
            f"{name}.{arg.name}: keyword-only is {kw_only}, schema says {arg.kw_only} ({_describe(arg)})"
        )
        assert _same_default(arg.default, param.default), (
            f"{name}.{arg.name}: default {param.default!r} != schema {_describe(arg)}"
        )


# --- the parser itself -----------------------------------------------------------------------

@pytest.mark.parametrize("text, value", [
    ("None", None), ("True", True), ("False", False), ("0", 0), ("-1", -1), ("2147483647", 2147483647),
    ("1.", 1.0), ("1e-06", 1e-6), ("0.0", 0.0), ('"BSH"', "BSH"), ("'half'", "half"), ('""', ""),
    ("[]", []), ("[1, 1]", [1, 1]),
])
def test_parse_default(text, value):
    parsed = parse_default(text)
    assert parsed == value and type(parsed) is type(value)


def test_parse_line_overload_kw_only_and_nested_parens():
    line = ("[custom] npu_x.List(Tensor(a!) self, int[] dims=[1, 2], *, float? eps=1e-05, str mode='half') "
            "-> (Tensor, Tensor)   # exposed=True, a=b")
    schema = parse_line(line)
    assert (schema.name, schema.overload, schema.returns) == ("npu_x", "List", "(Tensor, Tensor)")
    assert [(a.name, a.default, a.kw_only) for a in schema.args[1:]] == [
        ("dims", [1, 2], False), ("eps", 1e-05, True), ("mode", "half", True)]
    assert schema.args[0].type == "Tensor(a!)" and schema.args[0].default is NO_DEFAULT


def test_unsuffixed_overload_wins(schemas):
    assert schemas["npu_grouped_matmul"].overload == ""
    assert "x_dtype" in [a.name for a in schemas["npu_grouped_matmul"].args]
