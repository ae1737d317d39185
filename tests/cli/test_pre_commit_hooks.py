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

pytestmark = pytest.mark.slow

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
        assert hook["types_or"] == ["python", "jupyter"] and isinstance(hook["args"], list)  # notebooks migrate too


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
    assert "Would change 4 files:" in done.stdout and "  train.py (" in done.stdout
    assert "Needs attention (8 sites):" in done.stdout
    assert "requirements.txt:1:1: NPU132" in done.stdout  # torch>=2.1: no torch-npu release can be chosen
    assert snapshot(repo) == before  # --check writes nothing, not even a report directory

    done = _run_hook(hook, out)  # the migrated tree: nothing left to change, only the reported sites
    assert done.returncode == exitcodes.UNSUPPORTED, done.stderr
    assert "Would change" not in done.stdout
    assert _run_hook(hook, out, "--ignore", "NPU1").returncode == exitcodes.OK


def test_the_hook_environment_is_the_light_install(tmp_path):
    """The real pre-commit builds the hook's own environment from this repository: no torch in it,
    and well under 200 MB (it was 5.4 GB with torch as a dependency)."""
    root = HOOKS.parent
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("the repository is not a git clone (pre-commit installs a hook from a git revision)")
    user = tmp_path / "user"
    user.mkdir()
    (user / "model.py").write_text("import torch\n\nx = torch.zeros(1).cuda()\n")
    subprocess.run(["git", "init", "-q"], cwd=user, check=True)
    (user / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {root}\n    rev: {head.stdout.strip()}\n    hooks:\n      - id: npu-migrate-check\n")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-m", "pre_commit", "install-hooks"], cwd=user, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    (python,) = (tmp_path / "home").glob("repo*/py_env-*/bin/python")
    assert subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode != 0
    assert subprocess.run([str(python), "-c", "import npu_migrate.migrate.cli"], capture_output=True).returncode == 0
    size = sum(p.stat().st_size for p in (tmp_path / "home").rglob("*") if p.is_file() and not p.is_symlink())
    assert size < 200 * 2**20, f"{size / 2**20:.0f} MB"
    subprocess.run(["git", "add", "-A"], cwd=user, check=True)
    run = subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files"], cwd=user, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 1 and "model.py (1 rewrite)" in run.stdout  # the hook ran and failed the commit
