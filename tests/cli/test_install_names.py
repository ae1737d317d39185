"""No import-name clashes: npu-migrate installs only the ``npu_migrate`` namespace, so Hugging Face's
``kernels`` (PyPI ``kernels``, ``from kernels import get_kernel``) and sqlalchemy-migrate's
``migrate`` keep their names beside it; and migrated code imports ``torch_npu`` and the vendored
helper only, never this tool."""

import ast
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.cli.conftest import migrate_demo

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HF_KERNELS = "kernels==0.17.2"  # Hugging Face's hub kernels
CLASHING = {"migrate", "kernels", "opmap"}
HELPER = "npu_glue"

PROBE = """
import importlib, json, sys
out = {}
import kernels
from kernels import get_kernel
out["kernels"] = kernels.__file__
import npu_migrate.kernels, npu_migrate.migrate.cli, npu_migrate.opmap
out["npu_migrate.kernels"] = npu_migrate.kernels.__file__
out["npu_migrate.migrate.cli"] = npu_migrate.migrate.cli.__file__
out["npu_migrate.opmap"] = npu_migrate.opmap.__file__
for name in ("migrate", "opmap"):
    try:
        importlib.import_module(name)
        out[name] = "importable"
    except ModuleNotFoundError:
        out[name] = None
import torch
with npu_migrate.kernels.emulate():
    import torch_npu
    out["emulated"] = bool(torch.npu.is_available() and torch.zeros(2).npu().is_npu and torch_npu.npu_rms_norm)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def hf_kernels(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("hf-kernels")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                           HF_KERNELS], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert (target / "kernels" / "__init__.py").is_file()
    return target


def test_hugging_face_kernels_and_npu_migrate_import_side_by_side(hf_kernels, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(hf_kernels), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(found["kernels"]).is_relative_to(hf_kernels)
    assert Path(found["npu_migrate.kernels"]) == ROOT / "kernels" / "__init__.py"
    assert Path(found["npu_migrate.migrate.cli"]) == ROOT / "migrate" / "cli" / "__init__.py"
    assert Path(found["npu_migrate.opmap"]) == ROOT / "opmap" / "__init__.py"
    assert found["migrate"] is None and found["opmap"] is None  # no top-level names of ours
    assert found["emulated"] is True  # the emulated NPU still works beside Hugging Face's kernels


INSTALLED = """
import importlib.metadata, json
dist = importlib.metadata.distribution("npu-migrate")
print(json.dumps({"top_level": dist.read_text("top_level.txt"), "files": [str(f) for f in dist.files or ()],
                  "scripts": {ep.name: ep.value for ep in dist.entry_points}, "at": str(dist.locate_file(""))}))
"""


def test_the_installed_distribution_has_only_the_npu_migrate_namespace(tmp_path):
    # from a clean directory: in the checkout, the source tree's own egg-info would answer instead
    done = subprocess.run([sys.executable, "-c", INSTALLED], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    dist = json.loads(done.stdout)
    assert Path(dist["at"]).name in ("site-packages", "dist-packages")
    assert dist["top_level"].split() == ["npu_migrate"]
    tops = {Path(f).parts[0] for f in dist["files"] if not f.startswith("..")}
    assert not tops & CLASHING, tops
    assert dist["scripts"]["migrate"] == "npu_migrate.migrate.cli:main"


def test_a_built_wheel_holds_only_the_namespace_and_its_data(tmp_path):
    source = tmp_path / "src"  # a copy: building in the checkout would leave build/ and egg-info there
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("migrate", "opmap", "kernels"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                           "--wheel-dir", str(tmp_path / "dist"), str(source)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("npu_migrate-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/top_level.txt"))
    assert top_level.split() == ["npu_migrate"]
    assert {n.split("/")[0] for n in names} == {"npu_migrate", wheel.name.split("-py")[0] + ".dist-info"}
    shipped = [f.relative_to(source).as_posix() for folder in ("migrate", "opmap", "kernels")
               for f in (source / folder).rglob("*") if f.is_file()]
    missing = [rel for rel in shipped if f"npu_migrate/{rel}" not in names]
    assert missing == []  # every module and data file: doc pages, report.css/js, op tables, helper, reference
    assert "npu_migrate/migrate/docs/NPU302.md" in names and "npu_migrate/migrate/outputs/static/report.js" in names


def _imports(source: str) -> set:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names |= {base} if node.module else {f"{base}{alias.name}" for alias in node.names}
    return names


def test_migrated_code_imports_only_torch_npu_and_the_vendored_helper(tmp_path):
    repo, out, _, _ = migrate_demo(tmp_path)
    added = set()
    for migrated in out.rglob("*.py"):
        rel = migrated.relative_to(out)
        source = migrated.read_text()
        assert not any(name.split(".")[0] in {"npu_migrate", *CLASHING} for name in _imports(source)), rel
        if rel.name == f"{HELPER}.py":  # the helper itself needs the standard library, torch and torch_npu
            assert {name.split(".")[0] for name in _imports(source)} <= {*sys.stdlib_module_names, "torch", "torch_npu"}
            continue
        added |= _imports(source) - _imports((repo / rel).read_text())
    assert added == {"torch_npu", f".{HELPER}", HELPER}  # the helper relatively, else from sys.path
