"""The receiver and string rewrites act only in files that use torch (issue 12 item 6): CuPy, Numba
and NumPy-only files stay untouched and get no ``import torch_npu``; a file with no imports at all
is reported, not rewritten; a file that imports from its own package is rewritten."""

import pytest

from npu_migrate.migrate.rules._scope import FOREIGN, PACKAGE, TORCH, UNKNOWN
from tests import snippets

DEVICE_CODES = ("NPU202", "NPU203", "NPU204", "NPU205")

CUPY = '''\
import cupy as cp


class Pinned:
    def __init__(self, data):
        self.data = data

    def upload(self):
        return cp.asarray(self.data)


def move(buffer, device="cuda", backend="nccl"):
    if buffer.is_cuda:
        return buffer
    return buffer.cuda()
'''

NUMBA = '''\
import numpy as np
from numba import cuda, vectorize


@vectorize(["float32(float32)"], target="cuda")
def double(x):
    return 2 * x


def run(values, device="cuda"):
    if device == "cuda":
        return double(np.asarray(values, dtype=np.float32))
    return values
'''

NUMPY = '''\
import numpy as np


def to_device(array, device="cuda"):
    """Moves whatever it is given; nothing here says it is a torch tensor."""
    if getattr(array, "is_cuda", False):
        return array
    return array.cuda() if device == "cuda" else np.asarray(array)
'''

PACKAGE_RELATIVE = '''\
from .model import Net


def build():
    return Net().cuda()
'''

PACKAGE_ABSOLUTE = '''\
from mypkg.model import Net


def build(device="cuda"):
    return Net().to(device)
'''


@pytest.fixture(scope="module")
def engine():
    return snippets.engine()


def run(engine, path, source):
    return snippets.migrate(source, path, using=engine)


def device_sites(result, action):
    return [f for f in result.findings if f.code in DEVICE_CODES and f.action == action]


@pytest.mark.slow
@pytest.mark.parametrize("source", [CUPY, NUMBA], ids=["cupy", "numba"])
def test_gpu_library_files_stay_untouched_and_silent_about_device_rewrites(engine, source):
    result = run(engine, "kernels.py", source)
    assert result.status == "unchanged"
    assert not device_sites(result, "rewritten") and not device_sites(result, "reported")
    assert "import torch_npu" not in (result.migrated or "")


def test_cupy_import_itself_is_reported(engine):
    findings = run(engine, "kernels.py", CUPY).findings
    assert [(f.code, f.line) for f in findings] == [("NPU119", 1), ("NPU119", 9)]


def test_numpy_only_file_is_reported_not_rewritten(engine):
    result = run(engine, "util.py", NUMPY)
    assert result.status == "unchanged"
    reported = device_sites(result, "reported")
    assert {f.code for f in reported} == {"NPU202", "NPU203"}
    assert all("not made: this file imports neither torch nor its own package" in f.message for f in reported)
    assert all(f.fallback is not None and "import torch_npu" in f.fallback.detail for f in reported)


@pytest.mark.parametrize("path, source", [("mypkg/train.py", PACKAGE_RELATIVE), ("mypkg/train.py", PACKAGE_ABSOLUTE)],
                         ids=["relative", "absolute"])
def test_files_of_a_torch_package_are_rewritten(engine, path, source):
    result = run(engine, path, source)
    assert result.status == "changed"
    assert device_sites(result, "rewritten") and not device_sites(result, "reported")
    assert ".npu()" in result.migrated or '"npu"' in result.migrated


def test_import_torch_npu_only_where_torch_is_used(engine):
    torch_file = run(engine, "train.py", "import torch\nx = torch.zeros(1).cuda()\n")
    assert torch_file.migrated == "import torch\nimport torch_npu  # noqa: F401\n\nx = torch.zeros(1).npu()\n"
    for source in (CUPY, NUMBA, NUMPY):
        assert "torch_npu" not in (run(engine, "other.py", source).migrated or "")


@pytest.mark.slow
def test_scope_kinds():
    from npu_migrate.migrate.context import FileContext
    from npu_migrate.migrate.names import NameResolver
    from npu_migrate.migrate.rules._scope import file_scope
    import libcst as cst

    def scope(path, source):
        module = cst.parse_module(source)
        return file_scope(FileContext(path, module, snippets.builtin_table(), NameResolver(module)))

    assert scope("a.py", "import transformers\n") == TORCH
    assert scope("a.py", "import torch\nimport cupy\n") == TORCH
    assert scope("a.py", "import jax\n") == FOREIGN
    assert scope("src/pkg/a.py", "from pkg.layers import Block\n") == PACKAGE
    assert scope("a.py", "from pkg.layers import Block\n") == UNKNOWN
    assert scope("a.py", "def f(x):\n    import torch\n    return x\n") == TORCH
