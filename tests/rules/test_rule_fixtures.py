"""Every rule fixture: ``fixtures/rules/<CODE>_<slug>/`` holds ``input.py``, ``expected.py`` (absent
when the input must stay unchanged) and ``diagnostics.txt`` (``line:col CODE message`` per site,
empty when the rule must stay silent). Each case runs with only its code enabled, and the migrated
output must be a fixed point (migrating it again changes nothing)."""

from pathlib import Path

import pytest

from tests import snippets

CASES = sorted(p for p in (Path(__file__).parents[2] / "fixtures" / "rules").iterdir() if p.is_dir())


def _diagnostics(result):
    return [f"{f.line}:{f.col} {f.code} {f.message}" for f in result.findings]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rule_fixture(case):
    code = case.name.split("_")[0]
    engine = snippets.engine([code])
    assert engine.rules, f"no rule emits {code}"
    source = (case / "input.py").read_bytes()
    result = snippets.migrate(source, "input.py", using=engine)

    expected_path = case / "expected.py"
    expected = expected_path.read_text() if expected_path.exists() else source.decode()
    migrated = result.migrated if result.status == "changed" else source.decode()
    assert migrated == expected

    wanted = [line for line in (case / "diagnostics.txt").read_text().splitlines() if line.strip()]
    assert _diagnostics(result) == wanted

    again = snippets.migrate(migrated, "input.py", using=engine, status=("unchanged", "skipped"))
    assert not [f for f in again.findings if f.action == "rewritten"]


def test_every_rule_has_fixtures_with_no_change_and_alias_cases():
    from npu_migrate.migrate.rules import all_rules

    names = [c.name for c in CASES]
    for rule in all_rules():
        mine = [n for n in names if n.split("_")[0] in rule.all_codes()]
        assert mine, f"{rule.__name__} has no fixtures"
        assert any(n.endswith("_nochange") for n in mine), f"{rule.__name__} lacks a no-change case"
        assert any(n.endswith("_aliased") for n in mine), f"{rule.__name__} lacks an aliased-import case"
