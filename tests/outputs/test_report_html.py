"""report.html: a self-contained review page. Checked as markup, then in a real headless Chromium
(Debian's /usr/bin/chromium, driven by Playwright): the filters hide and show findings, nothing
is fetched from the network, and a screenshot is taken."""

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.cli.app import app
from npu_migrate.migrate.outputs import report_html
from tests.cli.conftest import migrate_demo
from tests.outputs.test_report_sarif import finding, synthetic_report

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
# as /work/.library's machine notes say for this closed network: no background connections
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

FAILED_PARITY = {
    "passed": False, "spec": "/x/parity.yaml", "original": "/x/repo", "migrated": "/x/repo-npu", "backing": "cpu",
    "cases": [{"name": "tiny", "dtype": "float32", "passed": False, "errors": [], "weight_problems": [],
               "outputs": [{"kind": "output", "name": "logits", "passed": False, "cosine": 0.99, "max_abs_err": 0.5}],
               "gradients": [], "after_step": [],
               "first_divergent_module": {"module": "layers.0.input_layernorm", "call": 0},
               "op_coverage": {"fallback_ops": {"aten::_cdist_forward": 2}}}],
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    repo, out, reports, _ = migrate_demo(tmp_path_factory.mktemp("html"))
    return reports, json.loads((reports / "report.json").read_text())


def test_the_page_holds_the_same_counts_and_every_finding(demo):
    reports, report = demo
    page = (reports / "report.html").read_text()
    cards = dict(re.findall(r'data-card="([^"]+)"><div class="value">([^<]+)<', page))
    s = report["summary"]
    assert cards["Python files scanned"] == str(s["files_by_kind"]["python"]) and cards["changed"] == str(s["files_changed"])
    assert cards["unchanged"] == str(s["files_unchanged"]) and cards["skipped (nothing to migrate)"] == str(s["files_skipped"])
    assert cards["sites rewritten"] == str(s["sites_rewritten"]) and cards["need attention"] == str(s["sites_reported"])
    assert cards["numerics-changing"] == str(s["rewrites_by_safety"]["numerics-changing"])
    ids = {int(i) for i in re.findall(r'class="finding" [^>]*data-id="(\d+)"', page)}
    assert ids == set(range(len(report["findings"])))
    for f in report["findings"]:
        if f["fallback"]:
            assert report_html.escape(f["fallback"]["detail"]) in page  # each reported site's plan


def test_the_page_is_self_contained(demo):
    reports, _ = demo
    page = (reports / "report.html").read_text()
    assert "<style>" in page and "<script>" in page and "Content-Security-Policy" in page
    assert not re.search(r"<link|<script[^>]+src=|<img[^>]+src=\"?(?!data:)|url\(", page)
    assert not re.search(r"(src|href)=\"?(https?:)?//", page)


def test_findings_sit_beside_the_diff_line_they_are_about(demo):
    reports, report = demo
    page = (reports / "report.html").read_text()
    attention = next(f for f in report["findings"] if f["code"] == "NPU302")
    row = re.search(r'<tr class="del"><td class="ln">%d</td>.*?</tr>' % attention["line"], page).group(0)
    assert 'data-code="NPU302"' in row and report_html.escape(attention["snippet"]) in row


def test_markup_in_messages_is_escaped(tmp_path):
    report = synthetic_report([finding(message="<script>alert(1)</script>", snippet="<b>x</b>")])
    page = report_html.render(report)
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page


def test_migrate_report_adds_a_parity_result(demo, tmp_path):
    reports, _ = demo
    copy = tmp_path / "reports"
    shutil.copytree(reports, copy)
    parity = tmp_path / "parity.json"
    parity.write_text(json.dumps(FAILED_PARITY))
    result = CliRunner().invoke(app, ["report", str(copy), "--parity", str(parity)])
    assert result.exit_code == 0, result.output
    page = (copy / "report.html").read_text()
    assert "Parity: FAILED" in page and "layers.0.input_layernorm" in page and "aten::_cdist_forward x2" in page
    assert 'data-card="parity"><div class="value">FAIL<' in page


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "report.json").unlink(), "cannot read report"),
    (lambda d: (d / "report.json").write_text("{"), "not valid JSON"),
    (lambda d: (d / "report.json").write_text('{"schema_version": 1}'), "schema_version 1"),
    (lambda d: (d / "changes.patch").write_text("garbage\n"), "expected 'diff --git'"),
])
def test_migrate_report_on_a_broken_report_dir_is_a_clear_error(demo, tmp_path, damage, message):
    reports, _ = demo
    copy = tmp_path / "reports"
    shutil.copytree(reports, copy)
    damage(copy)
    result = CliRunner().invoke(app, ["report", str(copy)])
    assert result.exit_code == exitcodes.CONFIG_ERROR
    assert message in result.stderr and str(copy) in result.stderr.replace("\n", "")


# -- in a real browser -------------------------------------------------------------------------------
# .ci/run sets this: there the browser is installed, and a missing one is a failure, never a skip.
REQUIRE_BROWSER = "NPU_MIGRATE_REQUIRE_BROWSER"
NO_BROWSER = "the browser test needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium; .ci/run installs it)"


def browser_missing() -> str:
    """Why the browser test cannot run here ('' when it can)."""
    if not CHROMIUM.is_file():
        return NO_BROWSER
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the browser test needs Playwright (a test extra: pip install -e \".[test]\")"
    return ""


def unavailable(missing: str) -> None:
    """Skip the browser test with the reason, or fail it where the browser is required (CI)."""
    if os.environ.get(REQUIRE_BROWSER):
        pytest.fail(f"{missing}; {REQUIRE_BROWSER} is set (CI installs the browser), so it must run")
    pytest.skip(missing)


def test_a_missing_browser_skips_with_the_reason_and_fails_where_required(monkeypatch, tmp_path):
    monkeypatch.setattr(f"{__name__}.CHROMIUM", tmp_path / "no-chromium")
    assert browser_missing() == NO_BROWSER
    monkeypatch.delenv(REQUIRE_BROWSER, raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y chromium"):
        unavailable(browser_missing())
    monkeypatch.setenv(REQUIRE_BROWSER, "1")
    with pytest.raises(pytest.fail.Exception, match="must run"):
        unavailable(browser_missing())


@pytest.fixture(scope="module")
def browser():
    missing = browser_missing()
    if missing:
        unavailable(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def _visible(page, selector=".finding") -> list:
    return page.eval_on_selector_all(selector, "els => els.filter(e => e.offsetParent !== null)"
                                               ".map(e => [e.dataset.id, e.dataset.code, e.dataset.action, e.dataset.plan, e.dataset.safety])")


def _toggle(page, facet: str, value: str) -> None:
    page.click(f'#filters input[data-facet="{facet}"][value="{value}"]')


def test_filters_hide_and_show_findings_in_chromium(demo, browser, tmp_path):
    reports, report = demo
    findings = report["findings"]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    requests = []
    page.on("request", lambda request: requests.append(request.url))
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto((reports / "report.html").as_uri())

    def shown() -> int:
        return int(page.text_content("#shown-count"))

    assert shown() == len(findings) == len({v[0] for v in _visible(page)})

    _toggle(page, "action", "rewritten")
    visible = _visible(page)
    assert visible and all(v[2] != "rewritten" for v in visible)
    assert shown() == sum(f["action"] != "rewritten" for f in findings)
    assert page.is_hidden('details[data-path="tinyllama/model.py"]')  # only rewrites there
    assert page.is_visible('details[data-path="train.py"]')
    _toggle(page, "action", "rewritten")
    assert shown() == len(findings)

    _toggle(page, "code", "NPU101")
    assert all(v[1] != "NPU101" for v in _visible(page))
    assert shown() == sum(f["code"] != "NPU101" for f in findings)
    _toggle(page, "code", "NPU101")

    _toggle(page, "safety", "numerics-changing")
    assert all(v[4] != "numerics-changing" for v in _visible(page))
    _toggle(page, "safety", "numerics-changing")

    _toggle(page, "plan", "none")  # only sites with a fallback plan remain: the reported ones
    assert {v[2] for v in _visible(page)} == {"reported"}
    assert shown() == sum(1 for f in findings if f["fallback"])
    _toggle(page, "plan", "none")
    assert shown() == len(findings)

    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(data[16:20], "big") == 1400
    assert errors == []
    assert requests and all(url.startswith(("file:", "data:", "about:")) for url in requests), requests
    page.close()
