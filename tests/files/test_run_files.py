"""Dependency and launcher files through `migrate run`, as a user runs it: the patch, the reports,
SARIF, --check/--diff/--in-place, the cache and --select treat them like Python files."""

import json
import subprocess

import pytest

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.files import engine as files_engine
from tests.cli.conftest import git, git_init, invoke, write_tree

REPO = {
    "train.py": "import torch\n\nmodel = torch.nn.Linear(2, 2).cuda()\n",
    "requirements.txt": "torch==2.4.0\nflash-attn>=2.5\nnumpy\n",
    "scripts/run.sh": "#!/bin/bash\nexport CUDA_VISIBLE_DEVICES=0,1\nnvidia-smi\npython train.py\n",
    "README.md": "CUDA_VISIBLE_DEVICES=0 python train.py\n",
}


@pytest.fixture
def repo(tmp_path):
    return write_tree(tmp_path / "repo", REPO)


def _report(reports):
    return json.loads((reports / "report.json").read_text())


@pytest.mark.slow
def test_the_migrated_tree_patch_and_reports_hold_the_dependency_and_launcher_changes(repo, tmp_path):
    out, reports = tmp_path / "out", tmp_path / "r"
    result = invoke(repo, "--out", out, "--report-dir", reports, "--no-cache")
    assert result.exit_code == 0, result.output
    assert (out / "requirements.txt").read_text() == "torch==2.4.0\ntorch-npu==2.4.0.post4\nflash-attn>=2.5\nnumpy\n"
    assert (out / "scripts/run.sh").read_text() == ("#!/bin/bash\nexport ASCEND_RT_VISIBLE_DEVICES=0,1\nnpu-smi info\n"
                                                    "python train.py\n")
    assert (out / "README.md").read_text() == REPO["README.md"]  # not a launcher: copied as it is
    report = _report(reports)
    kinds = {f["path"]: f["kind"] for f in report["files"]}
    assert kinds == {"requirements.txt": "requirements", "scripts/run.sh": "shell", "train.py": "python"}
    s = report["summary"]
    assert s["files_by_kind"] == {"python": 1, "requirements": 1, "shell": 1} and s["files_other"] == 1
    assert s["packages_by_status"] == {"compatible": 1, "replace": 1, "unsupported": 0, "unlisted": 1}
    assert s["environment_sites"] == 2 and s["by_code"]["NPU220"] == 1 and s["by_code"]["NPU130"] == 1
    rows = {row["name"]: row for row in report["dependencies"]["packages"]}
    assert rows["torch"]["codes"] == ["NPU220"] and rows["flash-attn"]["status"] == "replace"
    assert rows["flash-attn"]["declared"] == [{"path": "requirements.txt", "line": 2, "spec": "flash-attn>=2.5",
                                               "group": "requirements"}]
    snippet = next(f["snippet"] for f in report["findings"] if f["code"] == "NPU221")
    assert snippet == "export CUDA_VISIBLE_DEVICES=0,1"

    markdown = (reports / "report.md").read_text()
    section = markdown.split("## Dependencies and environment", 1)[1]
    assert "| `flash-attn` | replace | `requirements.txt:2` `flash-attn>=2.5` |" in section
    assert "| `CUDA_VISIBLE_DEVICES` | `scripts/run.sh:2` | rewritten | `ASCEND_RT_VISIBLE_DEVICES` | NPU221 |" in section
    assert "| Packages declared | 3 |" in markdown
    page = (reports / "report.html").read_text()
    assert '<section id="dependencies">' in page and 'data-card="packages declared"><div class="value">3<' in page

    sarif = json.loads((reports / "report.sarif").read_text())
    results = [r for r in sarif["runs"][0]["results"] if r["locations"][0]["physicalLocation"]["artifactLocation"]
               ["uri"] == "requirements.txt"]
    added = next(r for r in results if r["ruleId"] == "NPU220")
    assert added["level"] == "note" and added["locations"][0]["physicalLocation"]["region"]["startLine"] == 1
    assert added["fixes"][0]["artifactChanges"][0]["replacements"][0]["insertedContent"]["text"] == \
        "torch-npu==2.4.0.post4\n"
    flagged = next(r for r in results if r["ruleId"] == "NPU130")
    assert flagged["level"] == "warning" and "Plan (replace-library)" in flagged["message"]["text"]

    git_init(repo)
    git(repo, "apply", "--check", str(reports / "changes.patch"))


@pytest.mark.slow
def test_check_and_diff_cover_the_dependency_files(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    checked = invoke(repo, "--check", "--select", "NPU2,NPU130")
    assert checked.exit_code == exitcodes.WOULD_CHANGE | exitcodes.UNSUPPORTED
    assert "  requirements.txt (1 rewrite)" in checked.stdout and "  scripts/run.sh (2 rewrites)" in checked.stdout
    assert "  train.py (1 rewrite)" in checked.stdout and "requirements.txt:2:1: NPU130" in checked.stdout
    diff = invoke(repo, "--diff", "--select", "NPU203,NPU220")
    assert "+torch-npu==2.4.0.post4\n" in diff.stdout and "scripts/run.sh" not in diff.stdout
    # torch-npu follows the migrated code: without the .cuda() rewrite nothing imports torch_npu
    assert "torch-npu" not in invoke(repo, "--diff", "--select", "NPU220").stdout
    only_reports = invoke(repo, "--check", "--select", "NPU130")
    assert only_reports.exit_code == exitcodes.UNSUPPORTED


@pytest.mark.slow
def test_in_place_writes_and_reverts_them(repo, tmp_path):
    git_init(repo)
    reports = tmp_path / "r"
    assert invoke(repo, "--in-place", "--report-dir", reports, "--no-cache").exit_code == 0
    assert "torch-npu==2.4.0.post4" in (repo / "requirements.txt").read_text()
    assert "ASCEND_RT_VISIBLE_DEVICES" in (repo / "scripts/run.sh").read_text()
    assert invoke(repo, "--in-place", "--revert", "--report-dir", reports).exit_code == 0
    assert (repo / "requirements.txt").read_text() == REPO["requirements.txt"]
    assert (repo / "scripts/run.sh").read_text() == REPO["scripts/run.sh"]


@pytest.mark.slow
def test_the_cache_serves_them_and_their_key_follows_the_python_files(repo, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = invoke(repo, "--out", tmp_path / "o1", "--report-dir", tmp_path / "r1", "--cache-dir", cache)
    assert first.exit_code == 0

    def refuse(*args, **kwargs):
        raise AssertionError("a dependency file was migrated although cached")

    monkeypatch.setattr(files_engine, "migrate_file", refuse)  # files.run imports it on a cache miss only
    second = invoke(repo, "--out", tmp_path / "o2", "--report-dir", tmp_path / "r2", "--cache-dir", cache)
    assert second.exit_code == 0
    assert _report(tmp_path / "r1")["findings"] == _report(tmp_path / "r2")["findings"]
    assert (tmp_path / "r1/changes.patch").read_text() == (tmp_path / "r2/changes.patch").read_text()
    monkeypatch.undo()

    (repo / "train.py").write_text("import torch\n\nmodel = torch.nn.Linear(2, 2)\n")  # no torch_npu any more
    third = invoke(repo, "--out", tmp_path / "o3", "--report-dir", tmp_path / "r3", "--cache-dir", cache)
    assert third.exit_code == 0
    assert (tmp_path / "o3/requirements.txt").read_text() == REPO["requirements.txt"]


@pytest.mark.slow
def test_a_setup_py_edit_waits_for_a_python_file_the_rules_changed(tmp_path):
    repo = write_tree(tmp_path / "repo", {
        "setup.py": ("import torch\nfrom setuptools import setup\n\nGPU = torch.cuda.is_available()\n"
                     "setup(name='x', install_requires=[\n    'torch==2.6.0',\n])\n"),
        "model.py": "import torch_npu\n"})
    result = invoke(repo, "--out", tmp_path / "out", "--report-dir", tmp_path / "r", "--no-cache")
    assert result.exit_code == 0, result.output
    findings = {f["code"]: f for f in _report(tmp_path / "r")["findings"]}
    assert findings["NPU201"]["action"] == "rewritten"  # torch.cuda.is_available -> torch.npu.is_available
    assert findings["NPU006"]["action"] == "reported" and "NPU220 rewrite not applied" in findings["NPU006"]["message"]
    assert "torch-npu==2.6.0.post5" in findings["NPU006"]["fallback"]["detail"]
    assert "torch-npu" not in (tmp_path / "out/setup.py").read_text()
    clean = write_tree(tmp_path / "clean", {
        "setup.py": "from setuptools import setup\nsetup(name='x', install_requires=['torch==2.6.0'])\n",
        "model.py": "import torch_npu\n"})
    assert invoke(clean, "--out", tmp_path / "o2", "--report-dir", tmp_path / "r2").exit_code == 0
    assert "install_requires=['torch==2.6.0', 'torch-npu==2.6.0.post5']" in (tmp_path / "o2/setup.py").read_text()
    subprocess.run(["python3", "-c", "import ast,sys; ast.parse(open(sys.argv[1]).read())",
                    str(tmp_path / "o2/setup.py")], check=True)


def test_the_cache_salt_covers_the_torch_npu_release_table(tmp_path, monkeypatch):
    from npu_migrate.migrate import cache
    from npu_migrate.migrate.limits import Limits

    before = cache.salt([], [], None, None, Limits())
    root = tmp_path / "root"
    for package in ("migrate", "opmap"):
        (root / package).mkdir(parents=True)
    (root / "opmap" / "reference").mkdir()
    monkeypatch.setattr(cache, "_PACKAGE_ROOT", root)
    table = root / "opmap" / "reference" / "torch_npu_releases.yaml"
    table.write_text("releases: []\n")
    first = cache.salt([], [], None, None, Limits())
    table.write_text("releases: [{torch: 2.4.0, torch_npu: 2.4.0.post4, requires: {}}]\n")
    assert cache.salt([], [], None, None, Limits()) not in (first, before)
