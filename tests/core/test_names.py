import libcst as cst
import pytest

from npu_migrate.migrate.names import NameResolver


def _calls(src):
    module = cst.parse_module(src)
    resolver = NameResolver(module)
    found = []

    class Visitor(cst.CSTVisitor):
        def visit_Call(self, node):
            found.append((module.code_for_node(node.func), resolver.qualified_name(node.func)))

    module.visit(Visitor())
    return found


@pytest.mark.parametrize(
    "src, expected",
    [
        ("import torch as T\nT.cuda.synchronize()", "torch.cuda.synchronize"),
        ("import torch.nn.functional as F\nF.softmax(x)", "torch.nn.functional.softmax"),
        ("import torch.nn.functional\ntorch.nn.functional.softmax(x)", "torch.nn.functional.softmax"),
        ("from torch import cuda\ncuda.synchronize()", "torch.cuda.synchronize"),
        ("from torch.cuda import synchronize as sync\nsync()", "torch.cuda.synchronize"),
        ("def f():\n    import torch\n    torch.cuda.synchronize()", "torch.cuda.synchronize"),
        ("try:\n    import torch\nexcept ImportError:\n    pass\ntorch.cuda.synchronize()", "torch.cuda.synchronize"),
    ],
)
def test_aliases_resolve(src, expected):
    assert _calls(src)[-1][1] == expected


@pytest.mark.parametrize(
    "src",
    [
        "def synchronize():\n    pass\nsynchronize()",  # a user function sharing the name
        "cuda = make_device()\ncuda.synchronize()",  # a local variable
        "from .torch import cuda\ncuda.synchronize()",  # relative import of a user module
        "x.cuda()",  # a method on an unknown object is not a qualified name
    ],
)
def test_look_alikes_do_not_resolve(src):
    assert _calls(src)[-1][1] is None


def test_shadowed_import_falls_back_to_exact_scopes():
    src = (
        "import torch.nn.functional as F\n"
        "def a(x):\n    return F.softmax(x)\n"
        "def b(F):\n    return F.softmax(1)\n"
    )
    assert [q for _, q in _calls(src)] == ["torch.nn.functional.softmax", None]


def test_conflicting_imports_of_one_name_use_the_scope_at_the_site():
    src = (
        "def a():\n    import numpy as np\n    np.zeros(1)\n"
        "def b():\n    import torch as np\n    np.zeros(1)\n"
    )
    assert [q for _, q in _calls(src)] == ["numpy.zeros", "torch.zeros"]


# -- issue 25 item 8: star and run-time imports are imports ----------------------------------------------
@pytest.mark.parametrize("src, expected", [
    ("from torch.cuda import *\nsynchronize()", "torch.cuda.synchronize"),
    ("from torch import *\ndef f(x):\n    return device('cuda')", "torch.device"),
    ("from torch import *\nprint(1)", None),  # a builtin is bound (by the builtins), not the star import
    ("from torch import *\ndef f(zeros):\n    return zeros()", None),  # a parameter
    ("from torch import *\nfrom mylib import *\nsynchronize()", None),  # two star imports: unknown
    ("torch = __import__('torch')\ntorch.cuda.synchronize()", "torch.cuda.synchronize"),
    ("t = __import__('torch.cuda')\nt.cuda.synchronize()", "torch.cuda.synchronize"),  # the top package
    ("t = __import__('torch.cuda', fromlist=['x'])\nt.synchronize()", "torch.cuda.synchronize"),
    ("t = __import__('torch.cuda', None, None, ['x'])\nt.synchronize()", "torch.cuda.synchronize"),
    ("t = __import__('cuda', level=1)\nt.synchronize()", None),  # relative
    ("import importlib\nt = importlib.import_module('torch.cuda')\nt.synchronize()", "torch.cuda.synchronize"),
    ("import importlib as il\nt = il.import_module('torch.cuda')\nt.synchronize()", "torch.cuda.synchronize"),
    ("from importlib import import_module\nt = import_module('torch')\nt.cuda.synchronize()",
     "torch.cuda.synchronize"),
    ("import importlib\nt = importlib.import_module(name)\nt.synchronize()", None),  # not a literal
    ("t = import_module('torch')\nt.cuda.synchronize()", None),  # not importlib's
    ("import importlib\nt = importlib.import_module('torch')\nt = t.cuda\nt.synchronize()", None),  # rebound
])
def test_star_and_run_time_imports_resolve(src, expected):
    assert _calls(src)[-1][1] == expected


def test_star_names_are_what_the_module_reads_and_never_binds():
    resolver = NameResolver(cst.parse_module(
        "from torch.cuda import *\nimport os\n\n\ndef f(stream):\n    synchronize()\n"
        "    return [device_count() for _ in os.sched_getaffinity(0)], stream.query, len(stream)\n"))
    assert resolver.star_names("torch.cuda") == ["device_count", "synchronize"]
    assert resolver.imported_heads() == {"torch", "os"} and not resolver.ambiguous_star
    two = NameResolver(cst.parse_module("from torch.cuda import *\nfrom a import *\nsynchronize()\n"))
    assert two.ambiguous_star and two.star_names("torch.cuda") == []
