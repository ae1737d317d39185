"""The residual families are their packages' rules and take their codes from the rules' declarations."""

import pytest

from npu_migrate.migrate.diagnostics import DiagnosticCode
from npu_migrate.migrate.residual import FAMILIES
from npu_migrate.migrate import rules
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


def _family(monkeypatch, *rules_declared):
    """A family of the package ``made`` whose rules (one per declaration tuple) are the only rules."""
    made = []
    for declared in rules_declared:
        class Made(Rule):
            declarations = declared
        Made.__module__ = f"made.rule{len(made)}"
        made.append(Made)
    monkeypatch.setattr(rules, "all_rules", lambda: tuple(made))
    return Family("made", "made", "pattern.made", frozenset({"x"}), lambda view: [], lambda value: "")


def test_a_new_rule_of_a_family_package_covers_its_detections(monkeypatch):
    family = _family(monkeypatch, (DiagnosticCode("NPU990", "made-fused", "made → fused", rewrites=True),
                                   DiagnosticCode("NPU991", "made-unfused", "made, not fused")),
                     (DiagnosticCode("NPU994", "made-more", "made more → fused", rewrites=True),))
    assert family.codes == {"NPU990", "NPU991", "NPU994"} and family.report == "NPU991"


def test_a_family_whose_rules_report_two_codes_is_refused(monkeypatch):
    family = _family(monkeypatch, (DiagnosticCode("NPU992", "made-a", "a, not fused"),
                                   DiagnosticCode("NPU993", "made-b", "b, not fused")))
    with pytest.raises(ValueError, match="exactly one code"):
        family.report
