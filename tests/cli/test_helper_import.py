"""The vendored helper resolves in every package layout (issue 18 item 3): a tree holding a
regular package, a PEP 420 namespace sub-package (``proj/modules/`` without ``__init__.py``,
imported as ``proj.modules.layers``), a namespace package with no ``__init__.py`` at all, a ``src/``
layout, a script beside the package, a package file also run as ``python proj/tools/run_norm.py``,
and a file imported both as ``proj.model`` and as ``model``, is migrated with ``migrate run``; every
migrated module is then imported, and every script run, in a fresh interpreter under
``kernels.emulate()``, and each must compute its norm through the fused kernel."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.conftest import invoke, write_tree

NORM = '''\
import torch
from torch import nn


class Norm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def check():
    return Norm(8)(torch.arange(16.0).reshape(2, 8))
'''
SCRIPT = NORM + '''

if __name__ == "__main__":
    RESULT = check()
'''
#: two repositories: ``lib`` holds only packages (no helper at its top), ``app`` a script beside one
TREE = {
    "lib/proj/__init__.py": "",
    "lib/proj/model.py": NORM,
    "lib/proj/modules/layers.py": NORM.replace("import torch\n", "import torch\n\nfrom proj.model import Norm as _B  # noqa\n", 1),
    "lib/proj/tools/__init__.py": "",
    "lib/proj/tools/run_norm.py": SCRIPT,
    "lib/src/srcpkg/__init__.py": "",
    "lib/src/srcpkg/blocks.py": NORM,
    "lib/nsroot/deep/mod.py": NORM,
    "app/train.py": SCRIPT.replace("import torch\n", "import torch\n\nimport proj.model  # noqa: F401\n", 1),
    "app/proj/__init__.py": "",
    "app/proj/model.py": NORM,
}
#: (sys.path entries, module name) imported as modules, in one interpreter per repository; ``model``
#: is ``lib/proj/model.py`` imported a second way, from its own folder
MODULES = {"lib": [(["lib"], "proj.model"), (["lib"], "proj.modules.layers"), (["lib"], "nsroot.deep.mod"),
                   (["lib/src"], "srcpkg.blocks"), (["lib/proj"], "model")],
           "app": [(["app"], "train")]}
SCRIPTS = ["app/train.py", "lib/proj/tools/run_norm.py"]

DRIVER = textwrap.dedent('''\
    import importlib, json, os, runpy, sys
    import torch
    from npu_migrate import kernels

    root, mode, what = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    x = torch.arange(16.0).reshape(2, 8)
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    results = {}
    with kernels.emulate():
        import torch_npu
        real, calls = torch_npu.npu_rms_norm, []
        torch_npu.npu_rms_norm = lambda *a, **k: calls.append(1) or real(*a, **k)
        if mode == "modules":
            for paths, name in what:
                sys.path[:0] = [os.path.join(root, p) for p in paths]
                before = len(calls)
                module = importlib.import_module(name)
                got = module.check()
                glue = getattr(module, "npu_glue", None)  # the helper beside the file, not another copy
                beside = glue is None or os.path.dirname(glue.__file__) == os.path.dirname(module.__file__)
                results[name] = [(got - want).abs().max().item(), len(calls) - before, beside]
        else:  # as `python path/to/file.py`: its folder first on sys.path, run as __main__
            script = os.path.join(root, what)
            sys.path.insert(0, os.path.dirname(script))
            space = runpy.run_path(script, run_name="__main__")
            beside = os.path.dirname(space["npu_glue"].__file__) == os.path.dirname(script)
            results[what] = [(space["RESULT"] - want).abs().max().item(), len(calls), beside]
    print("@@" + json.dumps(results))
''')


def _run(root: Path, mode: str, what) -> dict:
    done = subprocess.run([sys.executable, "-c", DRIVER, str(root), mode, json.dumps(what)], capture_output=True,
                          text=True, timeout=600, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("@@"))[2:])


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    base = tmp_path_factory.mktemp("layouts")
    repo = write_tree(base / "repo", TREE)
    result = invoke(repo, "--out", base / "out", "--report-dir", base / "reports", "--select", "NPU320")
    assert result.exit_code == 0, result.output
    return repo, base / "out"


@pytest.mark.slow
def test_every_migrated_file_uses_the_helper_vendored_beside_it(migrated):
    _, out = migrated
    for rel in TREE:
        if TREE[rel]:
            text = (out / rel).read_text()
            assert "npu_glue.rms_norm_fits(" in text or "torch_npu.npu_rms_norm" in text, rel
            assert (out / rel).with_name("npu_glue.py").is_file(), rel


@pytest.mark.slow
@pytest.mark.parametrize("repo", sorted(MODULES))
def test_each_module_imports_and_fuses_in_its_layout(migrated, repo):
    _, out = migrated
    results = _run(out, "modules", MODULES[repo])
    assert set(results) == {name for _, name in MODULES[repo]}
    for name, (error, fused, beside) in results.items():
        assert error < 1e-5 and fused == 1 and beside, (name, error, fused, beside)


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_each_script_runs_as_a_file_and_fuses(migrated, script):
    _, out = migrated
    ((error, fused, beside),) = _run(out, "script", script).values()
    assert error < 1e-5 and fused == 1 and beside, (error, fused, beside)


@pytest.mark.slow
@pytest.mark.parametrize("repo", sorted(MODULES))
def test_the_original_tree_imports_the_same_way(migrated, repo):
    """The layouts are real: the original files import and run the same way (no helper, no kernel)."""
    original, _ = migrated
    results = _run(original, "modules", MODULES[repo])
    assert all(error < 1e-5 and fused == 0 for error, fused, _ in results.values()), results
