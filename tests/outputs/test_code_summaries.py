"""A report code (NPU303, NPU311, NPU321, NPU331, NPU341) is shown with its own declared summary, not
its rule's rewrite summary, everywhere a code is described: ``migrate explain`` (the listing and one
code's page), report.md and the SARIF rules."""

import pytest
from typer.testing import CliRunner

from npu_migrate.migrate import catalogue as code_catalogue
from npu_migrate.migrate.cli.app import app
from npu_migrate.migrate.outputs import report_md, report_sarif
from npu_migrate.migrate.outputs.codes import catalogue
from tests.outputs.test_report_sarif import finding, synthetic_report

PAIRS = {"NPU303": "NPU302", "NPU311": "NPU310", "NPU321": "NPU320", "NPU331": "NPU330", "NPU341": "NPU340"}


def _declared(code: str) -> str:
    return code_catalogue.declarations()[code].summary


def test_report_codes_are_declared_apart_from_their_rewrite():
    for report, fused in PAIRS.items():
        assert _declared(report) != _declared(fused)
        assert "→" not in _declared(report) and "→" in _declared(fused)


def test_the_catalogue_is_the_declarations():
    codes = catalogue()
    assert {code: info.summary for code, info in codes.items()} == code_catalogue.all_codes()
    for report, fused in PAIRS.items():
        assert (codes[report].rewrites, codes[fused].rewrites) == (False, True)
        assert codes[report].name != codes[fused].name and codes[report].level == "warning"


def test_explain_lists_each_report_code_with_its_own_summary():
    result = CliRunner().invoke(app, ["explain"])
    assert result.exit_code == 0
    lines = dict(line.split("  ", 1) for line in result.stdout.splitlines() if line.startswith("NPU"))
    for report, fused in PAIRS.items():
        assert " ".join(lines[report].split()) == _declared(report)
        assert " ".join(lines[fused].split()) == _declared(fused)


@pytest.mark.parametrize("code", sorted(PAIRS))
def test_explain_code_shows_its_own_summary(code):
    result = CliRunner().invoke(app, ["explain", code])
    assert result.exit_code == 0
    shown = " ".join(result.stdout.split())
    assert f"{code}: {_declared(code)}" in shown and _declared(PAIRS[code]) not in shown


def test_report_md_describes_a_report_code_with_its_own_summary():
    report = synthetic_report([finding(code, "m.py", i + 1) for i, code in enumerate(sorted(PAIRS))])
    markdown = report_md.render(report)
    for report_code, fused in PAIRS.items():
        row = next(line for line in markdown.splitlines() if line.startswith(f"| {report_code} |"))
        assert row == f"| {report_code} | 1 | {_declared(report_code)} |"
        assert _declared(fused) not in markdown


def test_sarif_rules_describe_a_report_code_with_its_own_summary(tmp_path):
    report = synthetic_report([finding(code, "m.py", i + 1) for i, code in enumerate(sorted(PAIRS))])
    rules = {r["id"]: r for r in report_sarif.build(report, tmp_path)["runs"][0]["tool"]["driver"]["rules"]}
    for report_code, fused in PAIRS.items():
        assert rules[report_code]["shortDescription"]["text"] == _declared(report_code)
        assert rules[report_code]["name"] == catalogue()[report_code].name != rules[fused]["name"]
        assert rules[report_code]["defaultConfiguration"]["level"] == "warning"
        assert rules[report_code]["help"]["markdown"].startswith(f"# {report_code}: {_declared(report_code)}\n")
