"""Issue 21 item 1: ``pip install npu-migrate`` is light. The distribution's dependencies leave torch
out (it is the ``parity`` extra), ``migrate run`` and the other commands work with torch imports
blocked (the same results as with torch), and ``migrate parity`` / ``migrate demo`` say exactly what
to install when torch is missing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from npu_migrate.migrate import exitcodes
from npu_migrate.migrate.cli.extras import TORCH_CPU_INDEX, missing_torch, torch_requirement

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "fixtures" / "demo"

# A meta-path finder in front of every other one: torch (and everything under it) cannot be imported.
NO_TORCH = """
import importlib.abc, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
sys.meta_path.insert(0, NoTorch())
sys.argv = ["migrate", *sys.argv[1:]]
from npu_migrate.migrate.cli import main
main()
"""


def migrate(tmp_path: Path, *args, block_torch: bool):
    command = [sys.executable, "-c", NO_TORCH, *map(str, args)] if block_torch else \
        [sys.executable, "-m", "npu_migrate.migrate", *map(str, args)]
    env = {**os.environ, "NPU_MIGRATE_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)


def test_the_distribution_depends_on_no_torch_and_the_parity_extra_brings_it():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("torch") for d in project["dependencies"])
    assert any(d.startswith("torch") for d in project["optional-dependencies"]["parity"])
    assert "npu-migrate[parity]" in project["optional-dependencies"]["test"]
    assert torch_requirement().startswith("torch")


def test_without_torch_run_gives_the_same_results(tmp_path):
    results = {}
    for blocked in (True, False):
        work = tmp_path / ("blocked" if blocked else "torch")
        work.mkdir()
        done = migrate(work, "run", DEMO, "--out", work / "out", "--report-dir", work / "r", "--no-cache",
                       block_torch=blocked)
        assert done.returncode == 0, done.stderr[-3000:]
        check = migrate(work, "run", DEMO, "--check", "--output-format", "json", "--no-cache", block_torch=blocked)
        assert check.returncode == exitcodes.WOULD_CHANGE | exitcodes.UNSUPPORTED, check.stderr[-3000:]
        report = json.loads((work / "r/report.json").read_text())
        results[blocked] = (report["summary"], report["findings"], json.loads(check.stdout),
                            (work / "r/changes.patch").read_text().replace(str(work), "<work>"))
    assert results[True] == results[False]
    assert "blocked by the test" not in done.stderr


@pytest.mark.parametrize("args", [["explain", "NPU302"], ["ops", "list"], ["--version"],
                                  ["ops", "show", "torch.cuda.synchronize"]])
def test_the_other_commands_need_no_torch(tmp_path, args):
    done = migrate(tmp_path, *args, block_torch=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip()


def test_parity_without_torch_says_exactly_what_to_install(tmp_path):
    done = migrate(tmp_path, "parity", "--spec", DEMO / "parity.yaml", block_torch=True)
    assert done.returncode == exitcodes.CONFIG_ERROR
    assert "Traceback" not in done.stderr
    err = " ".join(done.stderr.split())
    assert f"-m pip install '{torch_requirement()}' --index-url {TORCH_CPU_INDEX}" in err
    assert "-m pip install 'npu-migrate[parity]'" in err


def test_demo_without_torch_migrates_then_says_what_to_install(tmp_path):
    done = migrate(tmp_path, "demo", "--workdir", tmp_path / "d", block_torch=True)
    assert done.returncode == exitcodes.CONFIG_ERROR, done.stderr[-3000:]
    assert "Python files scanned" in done.stdout and (tmp_path / "d/npu-migrate-report/report.md").is_file()
    assert "npu-migrate[parity]" in done.stderr and "--no-parity" in done.stderr
    assert migrate(tmp_path, "demo", "--workdir", tmp_path / "d2", "--no-parity", block_torch=True).returncode == 0


def test_with_torch_nothing_is_missing():
    assert missing_torch("migrate parity") is None
