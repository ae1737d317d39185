"""A refused region says why as data: the kind and the name, besides the reason's words."""

import pickle

import libcst as cst

from npu_migrate.migrate.defuse import region_problem
from npu_migrate.migrate.refusal import Refusal, RefusalKind


def _body(source: str) -> cst.IndentedBlock:
    return cst.parse_module(source).body[0].body


def test_a_name_only_the_original_defines_is_refused_with_its_kind_and_name():
    block = _body("def f(x):\n    dtype = x.dtype\n    y = x * 2\n    return y.to(dtype)\n")
    problem = region_problem(block, block, 0, 2, (), {"x"}, {"y"})
    assert isinstance(problem, Refusal)
    assert problem.kind is RefusalKind.READ_AFTER_ORIGINAL_ONLY and problem.name == "dtype"
    assert problem == "`dtype` is read after the region but only the original branch defines it"


def test_a_name_only_the_fused_branch_defines_is_another_kind():
    block = _body("def f(x):\n    y = x * 2\n    return y + z\n")
    problem = region_problem(block, block, 0, 1, (), {"x"}, {"y", "z"})
    assert problem.kind is RefusalKind.READ_AFTER_FUSED_ONLY and problem.name == "z"


def test_an_early_exit_and_a_stale_read_have_their_kinds():
    block = _body("def f(x):\n    if x:\n        return x\n    y = x\n    return y\n")
    assert region_problem(block, block, 0, 2, (), {"x"}, {"y"}).kind is RefusalKind.EARLY_EXIT
    block = _body("def f(x):\n    x = x + 1\n    y = x * 2\n    return y\n")
    assert region_problem(block, block, 0, 2, (), {"x"}, {"y"}).kind is RefusalKind.STALE_READ


def test_a_refusal_survives_pickling_as_itself():
    refusal = Refusal(RefusalKind.STALE_READ, "why", "x")
    again = pickle.loads(pickle.dumps(refusal))
    assert (again, again.kind, again.name, type(again)) == ("why", RefusalKind.STALE_READ, "x", Refusal)
