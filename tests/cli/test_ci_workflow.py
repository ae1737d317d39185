"""Issue 21 item 4: the GitHub Actions workflow in docs/ci.md works as written. Its ``migrate`` steps
run as commands (as the runner runs them: bash, in the checkout) on a repository of model code; the
files the other steps read (the SARIF to upload, report.md as the pull request's body) are there and
valid."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import yaml

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.outputs import report_md
from tests.cli.conftest import DEMO_REPO, git_init
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "tests" / "outputs" / "data" / "sarif-2.1.0.json"


def workflow() -> dict:
    text = (ROOT / "docs" / "ci.md").read_text()
    (block,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    return yaml.safe_load(block)


def steps() -> list:
    (job,) = workflow()["jobs"].values()
    return job["steps"]


def test_the_workflow_installs_the_light_distribution():
    (install,) = [s for s in steps() if "pip install" in s.get("run", "")]
    assert shlex.split(install["run"])[-1] == "npu-migrate"  # no extra: no torch in CI's check job
    assert workflow()["permissions"]["security-events"] == "write"


@pytest.mark.slow
def test_the_workflow_steps_run_as_documented(tmp_path):
    repo = tmp_path / "checkout"
    subprocess.run(["cp", "-r", str(DEMO_REPO), str(repo)], check=True)
    git_init(repo)
    migrate = Path(sys.executable).with_name("migrate")
    env = {**os.environ, "PATH": os.pathsep.join([str(migrate.parent), os.environ.get("PATH", "")]),
           "NPU_MIGRATE_CACHE_DIR": str(tmp_path / "cache")}
    for _ in range(2):  # a second run finds the first one's report directory in the checkout
        ran = []
        for step in steps():
            command = step.get("run", "")
            if command.startswith("migrate "):
                done = subprocess.run(["bash", "-c", command], cwd=repo, env=env, capture_output=True, text=True,
                                      timeout=600)
                ran.append(done)
        (check,) = ran
        assert check.returncode == exitcodes.WOULD_CHANGE | exitcodes.UNSUPPORTED, check.stderr  # the gate fails the job
        assert "::warning file=train.py,line=" in check.stdout and "::notice file=" in check.stdout

    (upload,) = [s for s in steps() if s.get("uses", "").startswith("github/codeql-action/upload-sarif")]
    sarif = json.loads((repo / upload["with"]["sarif_file"]).read_text())
    schema = json.loads(SCHEMA.read_text())
    assert list(jsonschema.validators.validator_for(schema)(schema).iter_errors(sarif)) == []
    assert sarif["runs"][0]["results"] and sarif["runs"][0]["tool"]["driver"]["informationUri"]
    assert all(not r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].startswith("npu-migrate-report")
               for r in sarif["runs"][0]["results"])

    (body,) = [s for s in steps() if "gh pr edit" in s.get("run", "")]
    body_file = shlex.split(body["run"])[shlex.split(body["run"]).index("--body-file") + 1]
    text = (repo / body_file).read_text()
    assert 0 < len(text) <= report_md.MAX_CHARS and "## Needs attention" in text
    assert "new file `tinyllama/npu_glue.py`" in text and "new dependency `torch_npu`" in text
    assert not (tmp_path / "checkout-npu").exists()  # --check: no migrated tree
