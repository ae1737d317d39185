"""One declaration per diagnostic code (``diagnostics.DiagnosticCode`` in each rule's ``declarations``,
``TOOL_CODES`` for the tool's own): every code has its own name and summary, and every rule code
names an example fixture that exists and shows that code."""

from pathlib import Path

import pytest

from npu_migrate.migrate import diagnostics
from npu_migrate.migrate.diagnostics import DiagnosticCode
from npu_migrate.migrate.files.codes import DECLARATIONS as FILE_CODES
from npu_migrate.migrate.rules import all_rules
from npu_migrate.migrate.rules.base import Rule

FIXTURES = Path(__file__).parents[2] / "fixtures" / "rules"
RULE_CODES = [d for rule in all_rules() for d in rule.declarations]


def test_every_code_has_its_own_declared_name_and_summary():
    declared = diagnostics.declarations()
    assert set(declared) == set(diagnostics.TOOL_CODES) | {d.code for d in RULE_CODES} | {d.code for d in FILE_CODES}
    for code, d in declared.items():
        assert d.code == code and d.summary.strip() and d.name.strip(), code
    names = [d.name for d in declared.values()]
    assert len(set(names)) == len(names), "two codes share a name"
    for rule in all_rules():
        summaries = [d.summary for d in rule.declarations]
        assert len(set(summaries)) == len(summaries), f"{rule.__name__}: two codes share a summary"


def test_the_rule_attributes_are_derived_from_the_declarations():
    for rule in all_rules():
        assert rule.code == rule.declarations[0].code and rule.summary == rule.declarations[0].summary
        assert rule.all_codes() == tuple(d.code for d in rule.declarations)


@pytest.mark.parametrize("attrs", [{"code": "NPU999", "summary": "x"}, {"summaries": {"NPU999": "x"}},
                                   {"declarations": ()}, {"declarations": ("NPU999",)}])
def test_a_code_declared_any_other_way_is_refused(attrs):
    with pytest.raises(TypeError, match="declar"):
        type("Stray", (Rule,), dict(attrs))


def test_a_declared_rule_may_not_override_a_summary():
    with pytest.raises(TypeError, match="summary"):
        type("Override", (all_rules()[0],), {"summary": "another text"})


def test_tool_codes_are_declared_by_their_constants():
    declared = diagnostics.tool_declarations()
    assert declared[diagnostics.PARSE_ERROR] == DiagnosticCode("NPU001", "parse-error", diagnostics.TOOL_CODES["NPU001"])
    assert all(not d.rewrites and d.example is None for d in declared.values())


@pytest.mark.parametrize("declared", RULE_CODES, ids=[d.code for d in RULE_CODES])
def test_every_rule_code_names_an_example_fixture_that_shows_it(declared):
    assert any(p.is_dir() for p in FIXTURES.glob(f"{declared.code}_*")), f"no fixtures/rules/{declared.code}_*"
    assert declared.example, f"{declared.code} declares no example fixture"
    example = FIXTURES / declared.example_dir
    assert (example / "input.py").is_file(), f"{declared.code}: example {example} does not exist"
    codes = [line.split()[1] for line in (example / "diagnostics.txt").read_text().splitlines() if line.strip()]
    assert declared.code in codes, f"{example}/diagnostics.txt has no {declared.code}"
    # a rewrite's example shows the rewrite, a report's leaves the file as it is
    assert (example / "expected.py").is_file() == declared.rewrites, declared.code
