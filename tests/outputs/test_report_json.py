"""report.json (schema 2) and report.md: fix safety on every finding, consistent counts, and the
``suppressed`` action (sites kept by ``# npu-migrate: ignore[CODE]``) counted and listed."""

import json
import re

import pytest

from npu_migrate.migrate.findings import Finding, fix_safety
from npu_migrate.migrate.outputs import report_html, report_md
from npu_migrate.migrate.outputs.codes import catalogue
from tests.cli.conftest import migrate_demo
from tests.outputs.test_report_sarif import finding, synthetic_report


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    repo, out, reports, _ = migrate_demo(tmp_path_factory.mktemp("json"))
    return repo, reports, json.loads((reports / "report.json").read_text())


def test_every_finding_carries_its_fix_safety(demo):
    _, _, report = demo
    seen = set()
    for f in report["findings"]:
        if f["action"] != "rewritten":
            expected = None
        else:
            expected = {"NPU2": "safe", "NPU3": "numerics-changing"}[f["code"][:4]]
        assert f["safety"] == expected, f
        seen.add(f["safety"])
    assert seen == {None, "safe", "numerics-changing"}
    safety = report["summary"]["rewrites_by_safety"]
    assert safety["safe"] + safety["numerics-changing"] == report["summary"]["sites_rewritten"]


def test_safety_follows_the_action():
    site = Finding("NPU302", "fused attention", "rewritten")
    assert site.safety == "numerics-changing" and site.to_json()["safety"] == "numerics-changing"
    site.action = "reported"  # an edit the engine could not verify is downgraded: no fix, no safety
    assert site.safety is None and site.to_json()["safety"] is None
    assert fix_safety("NPU203", "rewritten") == "safe" and fix_safety("NPU203", "suppressed") is None


def test_counts_add_up(demo):
    repo, _, report = demo
    s = report["summary"]
    assert s["files_changed"] + s["files_unchanged"] + s["files_skipped"] + s["files_errored"] == s["files_scanned"]
    assert s["files_scanned"] == len(report["files"]) == sum(s["files_by_kind"].values())
    assert s["files_by_kind"]["python"] == len(list(repo.rglob("*.py")))
    declared = [f["path"] for f in report["files"] if f["kind"] != "python"]
    assert declared == ["requirements.txt"]  # the demo's one dependency file
    assert s["files_other"] == sum(1 for p in repo.rglob("*") if p.is_file() and p.suffix != ".py") - len(declared)
    assert sum(s["by_code"].values()) == len(report["findings"])
    assert s["sites_rewritten"] + s["sites_reported"] + s["sites_suppressed"] == len(report["findings"])


def test_report_md_shows_the_same_counts_and_the_safety(demo):
    _, reports, report = demo
    markdown = (reports / "report.md").read_text()
    rows = dict(re.findall(r"^\| ([^|]+?) \| (\d+) \|$", markdown, re.M))
    s = report["summary"]
    assert rows["Files unchanged"] == str(s["files_unchanged"]) and rows["Files skipped (nothing to migrate)"] == str(s["files_skipped"])
    assert rows["Sites rewritten"] == str(s["sites_rewritten"]) and rows["Sites needing attention"] == str(s["sites_reported"])
    assert rows["… of which numerics-changing (fused kernels)"] == str(s["rewrites_by_safety"]["numerics-changing"])
    fused = next(f for f in report["findings"] if f["code"] == "NPU302")
    line = next(line for line in markdown.splitlines() if f"`{fused['path']}:{fused['line']}:{fused['col']}` NPU302" in line)
    assert line.endswith("numerics-changing: prove it with `migrate parity`")
    meanings = dict(re.findall(r"^\| (NPU\d+) \| \d+ \| (.*) \|$", markdown, re.M))
    assert set(meanings) == set(s["by_code"])
    assert all(meanings[code] == catalogue()[code].summary.replace("|", "\\|") for code in meanings)


def test_suppressed_sites_are_counted_and_listed_everywhere():
    report = synthetic_report([
        finding("NPU302", "m.py", 4, "suppressed", "y = att @ v", message="attention kept as written (ignore[NPU302])"),
        finding("NPU101", "m.py", 9, "reported", "z = x.double()"),
    ])
    s = report["summary"]
    assert (s["sites_suppressed"], s["sites_reported"], s["sites_rewritten"]) == (1, 1, 0)
    markdown = report_md.render(report)
    assert "| Sites suppressed (`# npu-migrate: ignore`) | 1 |" in markdown
    section = markdown.split("## Suppressed", 1)[1]
    assert "`m.py:4:0` NPU302 attention kept as written" in section and "NPU101" not in section
    page = report_html.render(report)
    assert 'data-facet="action" value="suppressed"' in page
    assert 'data-card="suppressed"><div class="value">1<' in page
