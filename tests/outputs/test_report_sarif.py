"""report.sarif: valid SARIF 2.1.0 (the vendored official schema), what GitHub code scanning's upload
requires, rules generated from the code declarations, stable fingerprints and exact fixes."""

import json
from pathlib import Path

import jsonschema
import pytest

from npu_migrate.migrate import diagnostics
from npu_migrate.migrate.helpers import BESIDE, HELPER
from npu_migrate.migrate.outputs import report_json, report_sarif
from npu_migrate.migrate.outputs.codes import catalogue
from npu_migrate.migrate.outputs.changes import Change
from npu_migrate.migrate.outputs.hunks import parse_patch
from npu_migrate.migrate.outputs.patch import build_patch
from tests.cli.conftest import git_init, invoke, migrate_demo, write_tree

SCHEMA = Path(__file__).parent / "data" / "sarif-2.1.0.json"


def _validator():
    schema = json.loads(SCHEMA.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _sarif(reports: Path) -> dict:
    return json.loads((reports / "report.sarif").read_text())


def finding(code="NPU101", path="a.py", line=1, action="reported", snippet="x = 1", **extra) -> dict:
    data = {"code": code, "path": path, "line": line, "col": 0, "message": f"{code} here", "api": None,
            "action": action, "safety": None, "target": None,
            "fallback": {"plan": "cpu", "detail": "keep it on the CPU"} if action == "reported" else None,
            "snippet": snippet}
    data.update(extra)
    return data


def synthetic_report(findings, files=None) -> dict:
    files = files or [{"path": p, "status": "unchanged", "error": None} for p in sorted({f["path"] for f in findings})]
    return {"schema_version": report_json.SCHEMA_VERSION, "summary": report_json.summarize(files, findings, 0),
            "files": files, "findings": findings}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return migrate_demo(tmp_path_factory.mktemp("sarif"))


@pytest.mark.slow
def test_the_demo_report_is_valid_sarif_2_1_0(demo):
    _, _, reports, _ = demo
    errors = [f"{e.json_path}: {e.message}" for e in _validator().iter_errors(_sarif(reports))]
    assert errors == []


@pytest.mark.slow
def test_a_run_with_file_errors_and_suppressions_is_valid_sarif(tmp_path):
    repo = write_tree(tmp_path / "repo", {"bad.py": "import torch\nx = torch.zeros(.cuda(\n",
                                          "ok.py": "import torch\ny = torch.zeros(2).double()\n"})
    reports = tmp_path / "r"
    assert invoke(repo, "--out", tmp_path / "out", "--report-dir", reports).exit_code == 16
    sarif = _sarif(reports)
    assert list(_validator().iter_errors(sarif)) == []
    levels = {r["ruleId"]: r["level"] for r in sarif["runs"][0]["results"]}
    assert levels["NPU001"] == "error" and levels["NPU101"] == "warning"
    assert sarif["runs"][0]["invocations"][0]["executionSuccessful"] is False

    suppressed = report_sarif.build(synthetic_report([finding(action="suppressed")]), tmp_path)
    assert list(_validator().iter_errors(suppressed)) == []
    result = suppressed["runs"][0]["results"][0]
    assert result["suppressions"] == [{"kind": "inSource", "justification": "# npu-migrate: ignore comment at the site"}]
    assert result["properties"]["action"] == "suppressed"


def test_the_driver_says_where_the_tool_lives(demo):
    from npu_migrate.migrate import HOMEPAGE

    driver = _sarif(demo[2])["runs"][0]["tool"]["driver"]
    assert driver["informationUri"] == HOMEPAGE
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert f'Homepage = "{HOMEPAGE}"' in pyproject  # declared twice: they must agree


def test_github_code_scanning_requirements(demo):
    """docs.github.com "SARIF support for code scanning": the properties the upload needs, and its limits."""
    repo, _, reports, _ = demo
    sarif = _sarif(reports)
    assert sarif["version"] == "2.1.0" and sarif["$schema"]
    assert len(sarif["runs"]) == 1  # at most 20 runs per file
    run = sarif["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "npu-migrate" and driver["version"]
    rules = driver["rules"]
    assert len(rules) <= 25_000 and len({r["id"] for r in rules}) == len(rules)
    for rule in rules:
        assert rule["id"] and rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
        assert rule["help"]["text"] and rule["defaultConfiguration"]["level"] in ("error", "warning", "note")
        assert len(rule["properties"]["tags"]) <= 20
    ids = [r["id"] for r in rules]
    results = run["results"]
    report = json.loads((reports / "report.json").read_text())
    assert len(results) == len(report["findings"]) <= report_sarif.MAX_RESULTS
    base = run["originalUriBaseIds"]["%SRCROOT%"]["uri"]
    assert base == repo.resolve().as_uri() + "/"
    for result in results:
        assert result["ruleId"] in ids and ids[result["ruleIndex"]] == result["ruleId"]
        assert result["message"]["text"]
        assert len(result["locations"]) == 1  # at most 1,000 (GitHub shows 100)
        physical = result["locations"][0]["physicalLocation"]
        uri = physical["artifactLocation"]["uri"]
        assert not uri.startswith("/") and "://" not in uri and (repo / uri).is_file()
        assert physical["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        assert physical["region"]["startLine"] >= 1 and physical["region"]["startColumn"] >= 1
        assert result["partialFingerprints"][report_sarif.FINGERPRINT]
    assert len({r["partialFingerprints"][report_sarif.FINGERPRINT] for r in results}) == len(results)


def test_regions_and_properties_match_report_json(demo):
    _, _, reports, _ = demo
    report = json.loads((reports / "report.json").read_text())
    for f, result in zip(report["findings"], _sarif(reports)["runs"][0]["results"]):
        region = result["locations"][0]["physicalLocation"]["region"]
        # one column convention: report.json, the console and the SARIF are all 1-based
        assert (result["ruleId"], region["startLine"], region["startColumn"]) == (f["code"], f["line"], f["col"])
        assert region["snippet"]["text"] == f["snippet"]
        assert result["properties"]["action"] == f["action"] and result["properties"]["safety"] == f["safety"]
        assert result["properties"]["plan"] == (f["fallback"]["plan"] if f["fallback"] else None)
        assert result["level"] == ("note" if f["action"] == "rewritten" else "warning")
        if f["fallback"]:
            assert f["fallback"]["detail"] in result["message"]["text"]


def test_rules_come_from_the_code_declarations(demo):
    _, _, reports, _ = demo
    rules = {r["id"]: r for r in _sarif(reports)["runs"][0]["tool"]["driver"]["rules"]}
    codes = catalogue()
    assert set(rules) == set(codes) and set(diagnostics.TOOL_CODES) <= set(rules)
    for code, rule in rules.items():
        page = diagnostics.doc_page(code)
        assert rule["help"]["markdown"] == page, code  # every known code has its doc page as help
        assert rule["shortDescription"]["text"] == codes[code].summary
        assert rule["fullDescription"]["text"] in " ".join(page.split())
    # a further code of a rule gets its own summary, not the rule's rewrite summary
    assert rules["NPU321"]["shortDescription"]["text"] != rules["NPU320"]["shortDescription"]["text"]
    assert rules["NPU321"]["shortDescription"]["text"] in diagnostics.doc_page("NPU321").splitlines()[0]
    assert rules["NPU321"]["name"] != rules["NPU320"]["name"]
    levels = {code: rules[code]["defaultConfiguration"]["level"] for code in ("NPU001", "NPU101", "NPU201", "NPU302",
                                                                             "NPU303", "NPU321")}
    assert levels == {"NPU001": "error", "NPU101": "warning", "NPU201": "note", "NPU302": "note",
                      "NPU303": "warning", "NPU321": "warning"}


def _fingerprints(reports: Path) -> dict:
    return {(r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["snippet"]["text"],
             r["locations"][0]["physicalLocation"]["region"]["startLine"]): r["partialFingerprints"]
            for r in _sarif(reports)["runs"][0]["results"]}


@pytest.mark.slow
def test_fingerprints_survive_lines_moving_and_tell_equal_sites_apart(tmp_path):
    body = "import torch\n\n\ndef f():\n    a = torch.zeros(2).double()\n    b = torch.zeros(2).double()\n" \
           "    a = torch.zeros(2).double()\n"
    repo = write_tree(tmp_path / "repo", {"m.py": body})
    invoke(repo, "--out", tmp_path / "o1", "--report-dir", tmp_path / "r1")
    first = _fingerprints(tmp_path / "r1")
    assert len(first) == 3 and len({tuple(p.values()) for p in first.values()}) == 3  # the two "a = ..." differ
    (repo / "m.py").write_text("# a comment\n# another\n" + body.replace("def f():", "def f():  # moved"))
    invoke(repo, "--out", tmp_path / "o2", "--report-dir", tmp_path / "r2")
    second = _fingerprints(tmp_path / "r2")
    assert sorted(second.values(), key=str) == sorted(first.values(), key=str)
    assert {line for _, _, line in second} == {line + 2 for _, _, line in first}


def _apply(text: str, replacements) -> str:
    for rep in sorted(replacements, key=lambda r: r["deletedRegion"]["charOffset"], reverse=True):
        start, length = rep["deletedRegion"]["charOffset"], rep["deletedRegion"]["charLength"]
        text = text[:start] + rep["insertedContent"]["text"] + text[start + length:]
    return text


@pytest.mark.slow
def test_a_fix_holds_exactly_its_sites_change(tmp_path):
    original = "import torch\n\nx = torch.zeros(3).cuda()\ny = 1"  # no newline at the end
    repo = write_tree(tmp_path / "repo", {"t.py": original})
    invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r")
    (result,) = _sarif(tmp_path / "r")["runs"][0]["results"]
    (change,) = result["fixes"][0]["artifactChanges"]
    assert change["artifactLocation"] == {"uri": "t.py", "uriBaseId": "%SRCROOT%"}
    # the fix changes the .cuda() line and adds the import it needs (a fix applied alone gives working code)
    assert _apply(original, change["replacements"]) == \
        "import torch\nimport torch_npu  # noqa: F401\n\nx = torch.zeros(3).npu()\ny = 1"
    assert "and the imports it needs" in result["fixes"][0]["description"]["text"]


def test_the_fixes_of_the_demo_rebuild_every_rewritten_line(demo):
    """Applying every distinct replacement of a file's fixes gives the migrated file, the imports the
    engine added included (every fix carries them)."""
    repo, out, reports, _ = demo
    by_file = {}
    for result in _sarif(reports)["runs"][0]["results"]:
        for fix in result.get("fixes", []):
            for change in fix["artifactChanges"]:
                reps = by_file.setdefault(change["artifactLocation"]["uri"], {})
                for rep in change["replacements"]:
                    reps[json.dumps(rep, sort_keys=True)] = rep
    assert set(by_file) == {"eval.py", "train.py", "tinyllama/model.py"}
    helper_import = BESIDE.format(HELPER).splitlines()
    for path, reps in by_file.items():
        patched = _apply((repo / path).read_text(), reps.values()).splitlines()
        migrated = (out / path).read_text().splitlines()
        assert patched == migrated, path


@pytest.mark.slow
def test_a_path_below_the_top_of_a_git_tree_is_named_from_the_top(tmp_path):
    write_tree(tmp_path / "proj", {"README.md": "x\n", "src/pkg/m.py": "import torch\ny = torch.zeros(2).double()\n"})
    git_init(tmp_path / "proj")
    reports = tmp_path / "r"
    invoke(tmp_path / "proj/src", "--out", tmp_path / "out", "--report-dir", reports)
    run = _sarif(reports)["runs"][0]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == (tmp_path / "proj").resolve().as_uri() + "/"
    assert run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "src/pkg/m.py"


@pytest.mark.slow
def test_a_package_in_a_virtualenv_inside_a_clone_is_named_from_its_own_directory(tmp_path):
    """A ``venv/`` in a clone that .gitignore does not list: its packages are not the repository's
    code, so a migrated package pip put there is its own %SRCROOT% (as outside any clone)."""
    package = "venv/lib/python3.11/site-packages/pkg"
    write_tree(tmp_path / "clone", {"README.md": "x\n", "venv/pyvenv.cfg": "home = /usr/bin\n",
                                    f"{package}/m.py": "import torch\ny = torch.zeros(2).double()\n"})
    git_init(tmp_path / "clone", commit=False)
    reports = tmp_path / "r"
    invoke(tmp_path / "clone" / package, "--out", tmp_path / "out", "--report-dir", reports)
    run = _sarif(reports)["runs"][0]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == (tmp_path / "clone" / package).resolve().as_uri() + "/"
    assert run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "m.py"


@pytest.mark.slow
def test_more_results_than_github_accepts_drop_the_least_severe(tmp_path):
    findings = [finding(line=i + 1, snippet=f"x{i}") for i in range(10)]
    findings += [finding("NPU201", line=i + 1, action="rewritten", snippet=f"y{i}", safety="safe")
                 for i in range(report_sarif.MAX_RESULTS)]
    sarif = report_sarif.build(synthetic_report(findings), tmp_path)
    run = sarif["runs"][0]
    assert len(run["results"]) == report_sarif.MAX_RESULTS
    assert sum(r["level"] == "warning" for r in run["results"]) == 10  # every warning kept
    assert run["properties"]["resultsLeftOut"] == 10
    assert "10 results left out" in run["invocations"][0]["toolExecutionNotifications"][0]["message"]["text"]


def test_fixes_are_cut_from_the_patch_hunks(tmp_path):
    old = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n"
    new = "a\nB\nc\nd\ne\nf\ng\nh\nI\nextra\nj\n"
    repo = write_tree(tmp_path / "repo", {"m.py": old})
    diffs = {d.path: d for d in parse_patch(build_patch([Change("m.py", old, new)]))}
    report = synthetic_report([finding("NPU201", "m.py", 2, "rewritten", "b"), finding("NPU202", "m.py", 9, "rewritten", "i")])
    results = report_sarif.build(report, repo, diffs, {"m.py": old})["runs"][0]["results"]
    first, second = ([rep for fix in r["fixes"] for c in fix["artifactChanges"] for rep in c["replacements"]]
                     for r in results)
    assert _apply(old, first) == old.replace("b\n", "B\n")
    assert _apply(old, second) == old.replace("i\n", "I\nextra\n")



def test_the_vendored_schema_is_the_published_file():
    import hashlib
    import re

    recorded = re.search(r"sha256: `([0-9a-f]{64})`", (SCHEMA.parent / "README.md").read_text()).group(1)
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == recorded
    assert json.loads(SCHEMA.read_text())["properties"]["version"]["enum"] == ["2.1.0"]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["llama", "mixtral", "gpt2"])
def test_reports_on_installed_transformers_models_are_valid(tmp_path, model):
    """Code not written here: a Hugging Face model package, migrated where pip put it (PATH is only read)."""
    import transformers

    source = Path(transformers.__file__).parent / "models" / model
    reports = tmp_path / "r"
    result = invoke(source, "--out", tmp_path / "out", "--report-dir", reports)
    assert result.exit_code == 0, result.output
    sarif = _sarif(reports)
    assert list(_validator().iter_errors(sarif)) == []
    report = json.loads((reports / "report.json").read_text())
    results = sarif["runs"][0]["results"]
    assert len(results) == len(report["findings"]) > 0
    assert sarif["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"] == source.resolve().as_uri() + "/"
    fused = [r for r in results if r["ruleId"].startswith("NPU3") and r["properties"]["action"] == "rewritten"]
    assert fused and all(r["properties"]["safety"] == "numerics-changing" and r["fixes"] for r in fused)
    for r in fused:  # each fused rewrite's fix replaces the lines at its site
        (change,) = r["fixes"][0]["artifactChanges"]
        original = (source / change["artifactLocation"]["uri"]).read_text()
        assert _apply(original, change["replacements"]) != original
    assert "<!DOCTYPE html>" in (reports / "report.html").read_text()


def test_a_long_run_of_rewritten_lines_gives_each_site_its_own_line(tmp_path):
    """A generated file whose every line is rewritten is one run of the diff: each site's fix is its
    own line (the added import goes with the first), so the fixes grow with the sites, not with
    their square; a long run whose lines do not pair up stays whole."""
    n = 200
    old = "import torch\n" + "".join(f"y{i} = torch.zeros({i}).cuda()\n" for i in range(n))
    new = "import torch\nimport torch_npu\n" + "".join(f"y{i} = torch.zeros({i}).npu()\n" for i in range(n))
    repo = write_tree(tmp_path / "repo", {"m.py": old})
    diffs = {d.path: d for d in parse_patch(build_patch([Change("m.py", old, new)]))}
    report = synthetic_report([finding("NPU203", "m.py", i + 2, "rewritten", f"y{i}") for i in range(n)])
    results = report_sarif.build(report, repo, diffs, {"m.py": old})["runs"][0]["results"]
    replacements = [rep for r in results for fix in r["fixes"] for c in fix["artifactChanges"]
                    for rep in c["replacements"]]
    assert len(replacements) == n
    assert _apply(old, replacements) == new
    assert results[7]["fixes"][0]["artifactChanges"][0]["replacements"][0]["insertedContent"]["text"] == \
        "y7 = torch.zeros(7).npu()\n"

    unlike = "import torch\n" + "".join(f"z{i} = completely_different_{i} * {i}\n" for i in range(n))
    diffs = {d.path: d for d in parse_patch(build_patch([Change("m.py", old, unlike)]))}
    results = report_sarif.build(report, repo, diffs, {"m.py": old})["runs"][0]["results"]
    (whole,) = results[7]["fixes"][0]["artifactChanges"][0]["replacements"]
    assert whole["insertedContent"]["text"] == "".join(unlike.splitlines(keepends=True)[1:])
