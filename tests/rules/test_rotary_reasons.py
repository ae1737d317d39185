"""NPU311: the reason a rotary site is not fused is true, so it names only code the file shows.

For every rotary fixture, each construct a finding quotes (in backticks) is code of its input, and a
rotation helper is said to be of another module only where the file imports it (never where it is
defined in the file: there the finding says why the view did not read it). The reasons are derived
from the first step of the match that failed (``rotary._unread``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import snippets

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "rules"
CASES = sorted(p for p in FIXTURES.iterdir() if p.name.startswith(("NPU310_rotary", "NPU311_rotary")))


def compact(text: str) -> str:
    return re.sub(r"\s+", "", text)


def reasons(case: Path):
    source = (case / "input.py").read_text()
    result = snippets.migrate(source, "input.py", select=["NPU310", "NPU311"], status=("changed", "unchanged"))
    return source, [f for f in result.findings if f.code == "NPU311"]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_quoted_construct_is_in_the_input(case):
    source, found = reasons(case)
    code = compact(source)
    for finding in found:
        for quoted in re.findall(r"`([^`]+)`", finding.message):
            assert compact(quoted) in code, f"{case.name}:{finding.line}: `{quoted}` is not in the input"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_another_module_is_named_only_for_an_imported_helper(case):
    source, found = reasons(case)
    for finding in found:
        said = re.search(r"its rotation `([\w.]+)` is a function of another module, which this file imports from "
                         r"`([\w.]*)`", finding.message)
        if said is None:
            continue
        local, module = said.group(1).split(".")[0], said.group(2)
        assert not re.search(rf"^def {local}\(", source, re.M), f"{case.name}: `{local}` is defined in the file"
        assert re.search(rf"^(from {re.escape(module)} import .*\b{local}\b|import {re.escape(module)}\b.*)", source,
                         re.M), f"{case.name}: no import of `{local}` from `{module}`"


def test_the_reasons_fixture_covers_each_kind_of_reason():
    _, found = reasons(FIXTURES / "NPU311_rotary_reasons")
    apis = {f.api for f in found}
    assert {"pattern.rotary.helper", "pattern.rotary.local", "pattern.rotary.rotation", "pattern.rotary.matrix",
            "pattern.rotary.operands"} <= apis
