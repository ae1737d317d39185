"""Issue 21 item 3: migrated code passes the user's linters. The imports a rewrite needs go where
isort/ruff put them, ``import torch_npu`` (a side-effect import) carries ``# noqa: F401`` unless the
module uses the name, and the lines a rewrite makes stay within the file's own width."""

import ast
import subprocess
import sys
from pathlib import Path

import libcst as cst

from npu_migrate.migrate.edits import ImportSpec
from npu_migrate.migrate.imports import add_imports
from npu_migrate.migrate.line_fit import file_width, fit_lines
from npu_migrate.migrate.names import NameResolver
import pytest

ROOT = Path(__file__).resolve().parents[2]
NPU = ImportSpec("torch_npu")


def added(source: str, *specs: ImportSpec, first_party=frozenset()) -> str:
    module = cst.parse_module(source)
    return add_imports(module, specs or (NPU,), NameResolver(module), first_party).code


def test_the_side_effect_import_sorts_into_the_third_party_section_with_noqa():
    source = '"""Doc."""\n\nimport math\n\nimport torch\nimport torch.nn as nn\nfrom torch import optim\n\nx = 1\n'
    assert added(source) == ('"""Doc."""\n\nimport math\n\nimport torch\nimport torch.nn as nn\n'
                             'import torch_npu  # noqa: F401\nfrom torch import optim\n\nx = 1\n')


def test_a_new_section_gets_its_blank_lines():
    assert added("import os\n\n\ndef f():\n    pass\n") == \
        "import os\n\nimport torch_npu  # noqa: F401\n\n\ndef f():\n    pass\n"
    assert added("from __future__ import annotations\n\nimport zlib\n\nfrom .a import b\n") == \
        "from __future__ import annotations\n\nimport zlib\n\nimport torch_npu  # noqa: F401\n\nfrom .a import b\n"


def test_an_import_sorting_first_takes_the_place_of_the_block():
    assert added('"""Doc."""\n\nimport zzz\n\nx = 1\n', ImportSpec("npu_glue")) == \
        '"""Doc."""\n\nimport npu_glue\nimport zzz\n\nx = 1\n'


def test_a_used_torch_npu_has_no_noqa_and_the_helper_goes_to_its_section():
    source = "import torch\n\nfrom .model import Net\n\ny = torch_npu.npu_rms_norm(x)\n"
    out = added(source, NPU, ImportSpec(".npu_glue", "npu_glue"))
    assert out == ("import torch\nimport torch_npu\n\nfrom .model import Net\nfrom .npu_glue import npu_glue\n\n"
                   "y = torch_npu.npu_rms_norm(x)\n")


def test_first_party_modules_form_their_own_section():
    source = "import torch\n\nfrom modeling import Net\n\nx = 1\n"
    assert added(source, first_party=frozenset({"modeling"})) == \
        "import torch\nimport torch_npu  # noqa: F401\n\nfrom modeling import Net\n\nx = 1\n"


def test_ruff_finds_nothing_new_after_adding_imports(tmp_path):
    cases = ["import os\nimport sys\n\nprint(os, sys)\n", '"""D."""\nimport math\n\nimport torch\n\nprint(math, torch)\n',
             "from __future__ import annotations\n\nimport torch\nfrom torch import nn\n\nprint(torch, nn)\n"]
    for number, source in enumerate(cases):
        (tmp_path / f"c{number}.py").write_text(added(source))
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache", "--select", "E4,E7,E9,F,I",
                           "--output-format", "concise", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_a_new_long_line_is_broken_within_the_files_width_and_old_ones_are_kept():
    original = "def f(x, cos, sin):\n    # " + "a" * 90 + "\n    return x * cos + rotate(x) * sin\n"
    migrated = original.replace("return x * cos + rotate(x) * sin", "return npu_glue.rotary_mul(x, cos, sin, 'half') if "
                                "npu_glue.rotary_fits(x, cos, sin, 'half') else x * cos + rotate(x) * sin")
    width = file_width(original)
    assert width == 96
    fitted = fit_lines(cst.parse_module(migrated), migrated, original)
    assert ast.dump(ast.parse(fitted)) == ast.dump(ast.parse(migrated))
    assert max(len(line) for line in fitted.splitlines()) <= width
    assert "    # " + "a" * 90 in fitted  # the original's long line is the user's
    assert "        npu_glue.rotary_mul(x, cos, sin, 'half')\n        if npu_glue.rotary_fits" in fitted


def test_long_calls_break_their_arguments():
    original = "def f():\n    pass\n"
    migrated = ("def f():\n    out = torch_npu.npu_fusion_attention(query, key, value, heads, 'BNSD', atten_mask=mask, "
                "scale=scale, keep_prob=1 - p if training else 1.0)[0]\n")
    fitted = fit_lines(cst.parse_module(migrated), migrated, original)
    assert ast.dump(ast.parse(fitted)) == ast.dump(ast.parse(migrated))
    assert max(len(line) for line in fitted.splitlines()) <= 88
    assert fitted.startswith("def f():\n    out = torch_npu.npu_fusion_attention(\n        query,")


@pytest.mark.slow
def test_ruff_reports_nothing_new_on_the_migrated_demo_and_fixture_models():
    """The measurement of benchmarks/lint_delta.py (ruff's default rules plus isort, and line length at
    each file's own width), run on the bundled demo and the fixture models."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "lint_delta.py")], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("new findings in all: 0"), done.stdout
