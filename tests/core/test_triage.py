"""Issue 23 item 1: the triage before libcst changes nothing but the time.

Every rule fixture (each with only its code enabled, and all together through the CLI) and the
installed transformers/models tree give byte-identical patches, report.json and trees with and
without ``--no-triage``; the triage does drop files (so the comparison is not vacuous); and its
reading of a module (``triage.Words``) is a superset of what the rules' own tests read.
"""

from __future__ import annotations

import ast
import filecmp
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import libcst as cst
import pytest

from npu_migrate.migrate import engine as engine_module
from npu_migrate.migrate import triage
from npu_migrate.migrate.cache import salt
from npu_migrate.migrate.limits import Limits
from npu_migrate.migrate.runner import run
from npu_migrate.opmap.table import builtin_files
from tests.snippets import builtin_table

FIXTURES = Path(__file__).parents[2] / "fixtures" / "rules"
CASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def table():
    return builtin_table()


def _dump(result):
    return [asdict(r) for r in result.files]


@pytest.mark.slow
def test_each_rule_fixture_with_its_code_is_the_same_with_and_without_triage(table):
    by_code = {}
    for case in CASES:
        by_code.setdefault(case.split("_")[0], []).append(f"{case}/input.py")
    for code, paths in by_code.items():
        with_triage = _dump(run(FIXTURES, paths, table, select=[code], jobs=2))
        without = _dump(run(FIXTURES, paths, table, select=[code], jobs=2, triage=False))
        assert with_triage == without, code


@pytest.mark.slow
def test_the_triage_keeps_libcst_from_files_that_hold_no_site(table, monkeypatch):
    """Not vacuous: with every rule on, some fixtures (look-alikes, no-change cases) never reach libcst,
    and every file that does hold a site still does."""
    parsed = []
    real = cst.parse_module
    monkeypatch.setattr(engine_module.cst, "parse_module", lambda text, *a, **k: parsed.append(text) or real(text, *a, **k))
    paths = [f"{case}/input.py" for case in CASES]
    result = run(FIXTURES, paths, table, isolate=False)
    with_triage = len(parsed)
    parsed.clear()
    reference = run(FIXTURES, paths, table, isolate=False, triage=False)
    assert _dump(result) == _dump(reference)
    assert with_triage < len(parsed)
    with_sites = [r for r in reference.files if r.findings]
    assert with_sites and with_triage >= len(with_sites)
    assert not [f for r in reference.files for f in r.findings if f.code == "NPU003"]  # the rules ran, none crashed


def _cli(path: Path, out: Path, reports: Path, *extra: str) -> None:
    done = subprocess.run([sys.executable, "-m", "npu_migrate.migrate", "run", str(path), "--out", str(out),
                           "--report-dir", str(reports), "--no-cache", "--isolated", *extra],
                          capture_output=True, text=True)
    assert done.returncode in (0, 16), done.stderr[-3000:]


def _same_tree(a: Path, b: Path) -> None:
    compared = filecmp.dircmp(a, b)
    assert not (compared.left_only or compared.right_only or compared.funny_files), (a, compared.left_only,
                                                                                     compared.right_only)
    _, mismatch, errors = filecmp.cmpfiles(a, b, compared.common_files, shallow=False)
    assert not mismatch and not errors, (a, mismatch, errors)
    for sub in compared.common_dirs:
        _same_tree(a / sub, b / sub)


def _outputs_equal(source: Path, tmp_path: Path) -> None:
    """One run with the triage and one without, into the same paths (the reports name them): the
    patch, report.json and the tree are byte-identical."""
    out, reports = tmp_path / "out", tmp_path / "reports"
    kept = {}
    for name, extra in (("triage", ()), ("no-triage", ("--no-triage",))):
        _cli(source, out, reports, *extra)
        kept[name] = tmp_path / name
        kept[name].mkdir()
        out.rename(kept[name] / "out")
        reports.rename(kept[name] / "reports")
    for report in ("changes.patch", "report.json"):
        assert (kept["triage"] / "reports" / report).read_bytes() == \
            (kept["no-triage"] / "reports" / report).read_bytes(), report
    _same_tree(kept["triage"] / "out", kept["no-triage"] / "out")


@pytest.mark.slow
def test_rule_fixtures_through_the_cli_are_byte_identical_with_and_without_triage(tmp_path):
    _outputs_equal(FIXTURES, tmp_path)


@pytest.mark.slow
def test_transformers_models_are_byte_identical_with_and_without_triage(tmp_path):
    """The whole installed transformers/models tree (about 2,600 files; minutes)."""
    transformers = pytest.importorskip("transformers")
    _outputs_equal(Path(transformers.__file__).parent / "models", tmp_path)


def test_no_triage_is_part_of_the_cache_key():
    assert salt(builtin_files(), (), None, None, Limits()) != salt(builtin_files(), (), None, None, Limits(), False)


# -- what the triage reads ----------------------------------------------------------------------
def _words(text: str) -> triage.Words:
    words = triage.words_of(text)
    assert words is not None
    return words


def test_words_hold_every_identifier_libcst_names():
    """A superset of libcst's Name values (what the rules' tests read), whatever the syntax."""
    text = '''
import torch.nn.functional as F
from torch import cat as join
from .local import helper
@decorate(key=value)
class Model(Base, metaclass=Meta):
    def forward(self, x, *args, scale: Annotated = None, **kwargs) -> Out:
        global counter
        try:
            y = [q for q in x if q]
        except Error as err:
            pass
        match x:
            case Point(x=px, y=py) | [first, *rest] | {"k": kv, **others}:
                pass
        lam = lambda lparam: lparam.attr
        return F.silu(join((x, y), dim=-1)).sum(axis=0)
'''
    module = cst.parse_module(text)
    libcst_names = {node.value for node in _walk(module) if isinstance(node, cst.Name)}
    assert libcst_names <= _words(text).names


def _walk(node):
    from npu_migrate.migrate.tree import walk

    return walk(node)


def test_words_of_each_function_include_its_inner_functions_and_marks():
    words = _words('''
def outer(x):
    def inner(y):
        return y ** -0.5 * 2
    return inner(x)

def other(z):
    return z
''')
    by_name = {f.name: f for f in words.functions}
    assert {"inner", "y", "outer", "x"} <= by_name["outer"].names
    assert by_name["outer"].half and by_name["outer"].multiplies and not by_name["other"].multiplies
    assert "z" not in by_name["outer"].names
    assert words.reach(by_name["outer"]).names >= by_name["inner"].names


def test_may_reference_follows_imports_star_imports_and_run_time_imports():
    assert _words("import torch\ntorch.cat(x)").may_reference("torch.cat")
    assert _words("from torch import cat as join\njoin(x)").may_reference("torch.cat")
    assert _words("from torch import *\ncat(x)").may_reference("torch.cat")
    assert _words("t = __import__('torch')\nt.cat(x)").may_reference("torch.cat")
    assert not _words("import numpy as np\nnp.cat(x)").may_reference("torch.cat")
    assert not _words("cat(x)").may_reference("torch.cat")


def test_may_denote_is_wide_where_the_resolver_is_unsure():
    assert "F" in _words("import torch.nn.functional as F\nF = None\nF.softmax(x)").may_denote(["torch.softmax"])
    assert "np" in _words("import numpy as np\nmatch x:\n    case _: pass").may_denote(["torch.softmax"])
    assert "sm" in _words("from torch import softmax as sm").may_denote(["torch.softmax"])
    assert "np" not in _words("import numpy as np").may_denote(["torch.softmax"])


def test_files_ast_does_not_accept_or_that_nest_deep_go_to_libcst():
    assert triage.words_of("def f(:\n") is None
    deep = "x = " + "[" * 120 + "1" + "]" * 120
    ast.parse(deep)
    assert triage.words_of(deep) is None
    assert triage.may_hold_site("def f(:\n", [], [])


def test_an_experts_class_gated_by_the_library_reaches_libcst_without_a_product_in_the_file(table):
    """NPU330's experts site is the decorated class (``_swiglu_experts``): no function of the file need
    multiply or name an activation for it to be found."""
    text = (FIXTURES / "NPU330_swiglu_hf_experts" / "input.py").read_text()
    text = text.replace("2 * config.intermediate_size", "config.gate_up_size")
    words = triage.words_of(text)
    assert not (words.multiplies or any(f.multiplies for f in words.functions))
    with_triage = engine_module.build_engine(table, select=["NPU330"]).migrate("experts.py", text.encode())
    without = engine_module.build_engine(table, select=["NPU330"], triage=False).migrate("experts.py", text.encode())
    assert asdict(with_triage) == asdict(without)
    assert with_triage.status == "changed" and [f.code for f in with_triage.findings] == ["NPU330"]
