"""The residual families take their codes from their rules' declarations."""

import pytest

from npu_migrate.migrate.diagnostics import DiagnosticCode
from npu_migrate.migrate.residual import FAMILIES
from npu_migrate.migrate.rules import all_rules
from npu_migrate.migrate.rules._residual import Family
from npu_migrate.migrate.rules.base import Rule


def test_each_family_names_every_rule_of_its_package():
    for family in FAMILIES:
        package = family.detect.__module__.rpartition(".")[0]
        beside = {rule for rule in all_rules() if rule.__module__.rpartition(".")[0] == package}
        assert set(family.rules) == beside, family.name
        assert family.codes == {c for rule in beside for c in rule.codes} | family.also
        assert family.report in family.codes and family.report not in family.also


def _rule(*declared):
    class Made(Rule):
        declarations = declared
    return Made


def test_a_new_code_of_a_family_rule_covers_its_detections():
    made = _rule(DiagnosticCode("NPU990", "made-fused", "made → fused", rewrites=True),
                 DiagnosticCode("NPU991", "made-unfused", "made, not fused"))
    family = Family("made", (made,), "pattern.made", frozenset({"x"}), lambda view: [], lambda value: "")
    assert family.codes == {"NPU990", "NPU991"} and family.report == "NPU991"


def test_a_family_whose_rules_report_two_codes_is_refused():
    made = _rule(DiagnosticCode("NPU992", "made-a", "a, not fused"), DiagnosticCode("NPU993", "made-b", "b, not fused"))
    with pytest.raises(ValueError, match="exactly one code"):
        Family("made", (made,), "pattern.made", frozenset({"x"}), lambda view: [], lambda value: "")
