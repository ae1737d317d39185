"""Named plans: the ``plans:`` section of the built-in op-table files, read by the rule modules by name
(``opmap.plans.plan``); validated like every record, refused in a user's file, shown by ``migrate ops
show``."""

import textwrap

import pytest
from typer.testing import CliRunner

from npu_migrate.migrate import rules
from npu_migrate.migrate.cli.app import app
from npu_migrate.opmap import BUILTIN_DIR, Fallback, SchemaError, load_sections, load_table, plans
from npu_migrate.opmap.plans import plan

PLANS = """
records:
  - api: torch.cuda.synchronize
    status: rename
    code: NPU201
    target: torch.npu.synchronize
plans:
  - name: slow
    plan: manual
    detail: call it less often
  - name: shaped
    plan: composite
    detail: reshape {what} to [B, N, S, D]
"""


@pytest.fixture
def builtin(tmp_path, monkeypatch):
    """A stand-in for the built-in op-table folder (plans are read only from there)."""
    monkeypatch.setattr("npu_migrate.opmap.BUILTIN_DIR", tmp_path)
    monkeypatch.setattr(plans, "BUILTIN_DIR", tmp_path)
    monkeypatch.setattr(plans, "_asked", set())
    plans.builtin_plans.cache_clear()
    yield tmp_path
    plans.builtin_plans.cache_clear()


def write(folder, text, name="family.yaml"):
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def error_of(path):
    with pytest.raises(SchemaError) as info:
        load_sections(path)
    return info.value


def test_a_plan_is_named_after_its_file_and_read_by_name(builtin):
    path = write(builtin, PLANS)
    named = {p.name: p for p in load_sections(path).plans}
    assert set(named) == {"family.slow", "family.shaped"}
    assert named["family.slow"].fallback == Fallback("manual", "call it less often")
    assert named["family.slow"].source == f"{path}:7"
    assert plan("family.shaped") == named["family.shaped"].fallback
    assert plan("family.shaped").filled(what="q").detail == "reshape q to [B, N, S, D]"
    assert "family.shaped" in plans.asked()


def test_a_name_the_file_does_not_declare_fails_where_it_is_asked_for(builtin):
    write(builtin, PLANS)
    with pytest.raises(LookupError, match=r"family\.yaml declares no plan named 'fast' \(its plans: shaped, slow\)"):
        plan("family.fast")
    with pytest.raises(LookupError, match="no built-in op-table file other.yaml"):
        plan("other.slow")


@pytest.mark.parametrize("entry, line, problem", [
    ("  - name: slow\n    plan: rewrite-it\n    detail: x\n", 3, "plan 'slow': plan 'rewrite-it' is not one of"),
    ("  - name: slow\n    plan: manual\n", 2, "missing required key 'detail'"),
    ("  - name: slow\n    plan: manual\n    detail: x\n    colour: red\n", 5, "unknown key 'colour'"),
    ("  - name: not-a-name\n    plan: manual\n    detail: x\n", 2, "must be a Python identifier"),
    ("  - name: slow\n    plan: manual\n    detail: a {broken template\n", 4, "not a valid template"),
    ("  - name: slow\n    plan: manual\n    detail: a {0} field\n", 4, "template field {0} is not a name"),
    ("  - name: slow\n    plan: manual\n    detail: x\n  - name: slow\n    plan: cpu\n    detail: y\n", 5,
     "plan 'family.slow' is defined twice (first at line 2)"),
])
def test_a_bad_plan_names_file_and_line(builtin, entry, line, problem):
    error = error_of(write(builtin, "plans:\n" + entry))
    assert error.line == line and problem in error.problem, error


def test_a_user_file_may_not_declare_plans(tmp_path):
    error = error_of(write(tmp_path, PLANS))
    assert error.line == 7 and "read only from the built-in op table" in error.problem
    with pytest.raises(SchemaError, match="read only from the built-in"):
        load_table([tmp_path / "family.yaml"])


def test_every_builtin_plan_is_read_by_a_rule():
    """No dead plan: importing the rules asks for each (a name not declared fails that import)."""
    rules.all_rules()
    declared = {named.name for named in load_table().plans()}
    assert declared and declared <= plans.asked()


def test_ops_show_prints_a_named_plan_and_validate_counts_plans():
    shown = CliRunner().invoke(app, ["ops", "show", "attention.underflow"])
    assert shown.exit_code == 0, shown.output
    lines = dict(line.split(": ", 1) for line in shown.output.splitlines())
    assert lines["plan"] == "attention.underflow" and lines["defined at"].startswith(str(BUILTIN_DIR / "attention.yaml"))
    assert (lines["fallback.plan"], lines["fallback.detail"]) == (plan("attention.underflow").plan,
                                                                 plan("attention.underflow").detail)
    valid = CliRunner().invoke(app, ["ops", "validate", str(BUILTIN_DIR / "attention.yaml")])
    count = len([p for p in load_table().plans() if p.name.startswith("attention.")])
    assert valid.exit_code == 0 and f"{count} plans OK" in valid.output
