"""``.pre-commit-hooks.yaml``: well-formed hook definitions whose entry, run as pre-commit runs it
(entry + args, in the repository's root, no file names), checks a real repo: it fails while there is
code to migrate, names the files, and passes on a migrated tree once reported codes are ignored."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from npu_migrate.migrate import exitcodes
from tests.cli.conftest import migrate_demo, snapshot

HOOKS = Path(__file__).resolve().parents[2] / ".pre-commit-hooks.yaml"
LANGUAGES = {"python", "system"}


def _hooks() -> list:
    return yaml.safe_load(HOOKS.read_text())


def test_hooks_are_well_formed():
    hooks = _hooks()
    assert [h["id"] for h in hooks] == ["npu-migrate-check", "npu-migrate-check-system"]
    for hook in hooks:
        assert {"id", "name", "entry", "language"} <= set(hook)
        assert hook["language"] in LANGUAGES and hook["pass_filenames"] is False
        assert shlex.split(hook["entry"])[:3] == ["migrate", "run", "--check"]
        assert hook["types_or"] == ["python"] and isinstance(hook["args"], list)


def _run_hook(hook: dict, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    """What pre-commit runs: the entry, then the hook's args (then the user's), in the repo root."""
    command = shlex.split(hook["entry"]) + hook["args"] + list(extra)
    migrate = Path(sys.executable).with_name("migrate")  # the console script of this environment
    env = dict(os.environ, PATH=os.pathsep.join([str(migrate.parent), os.environ.get("PATH", "")]))
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("hook", _hooks(), ids=lambda h: h["id"])
def test_the_entry_checks_a_repo(tmp_path, hook):
    repo, out, _, _ = migrate_demo(tmp_path)
    before = snapshot(repo)
    done = _run_hook(hook, repo)
    assert done.returncode == exitcodes.WOULD_CHANGE | exitcodes.UNSUPPORTED, done.stderr
    assert "Would change 4 files:" in done.stderr and "  train.py (" in done.stderr
    assert "Needs attention (8 sites):" in done.stderr
    assert "requirements.txt:1:0: NPU132" in done.stderr  # torch>=2.1: no torch-npu release can be chosen
    assert snapshot(repo) == before  # --check writes nothing, not even a report directory

    done = _run_hook(hook, out)  # the migrated tree: nothing left to change, only the reported sites
    assert done.returncode == exitcodes.UNSUPPORTED, done.stderr
    assert "Would change" not in done.stderr
    assert _run_hook(hook, out, "--ignore", "NPU1").returncode == exitcodes.OK
