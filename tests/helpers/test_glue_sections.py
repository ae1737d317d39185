"""The vendored helper's sources (issue 21 item 6, issue 22): a core and one section per rule family,
each declaring what it needs by its imports; ``assemble`` joins those a directory's files call, with a
header (version, sections, sha256 of the text below) that tells an unedited copy from an edited one."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from npu_migrate.migrate import __version__
from npu_migrate.migrate.helpers import HELPER
from npu_migrate.migrate.helpers.assemble import Header, assemble, digest, helper_text, split, unedited, used_names
from npu_migrate.migrate.helpers.sections import defining, sections, top_level_names, unknown, with_needs
from npu_migrate.migrate.rules import all_rules

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = list(sections())
FAMILIES = {"attention": "attention", "rotary": "rotary embedding", "norm": "RMSNorm", "mlp": "gated MLP",
            "router": "MoE gating"}  # the README's name of each family's section


def lines(text: str) -> int:
    return len(text.splitlines())


def _expected_outputs():
    return sorted((ROOT / "fixtures" / "rules").glob("*/expected.py"))


def _family(code: str) -> str:
    """The rule family (``migrate/rules/<family>/``) of the rule that emits ``code``."""
    (rule,) = [r for r in all_rules() if code in r.all_codes()]
    return rule.__module__.split(".")[-2]


@pytest.mark.parametrize("name", SECTIONS)
def test_each_section_with_only_its_needs_is_a_module_with_no_undefined_or_unused_name(name, tmp_path):
    text = assemble([name])
    assert split(text)[0].sections == with_needs([name]) == (("core",) if name == "core" else ("core", name))
    compile(text, f"{HELPER}.py", "exec")
    path = tmp_path / f"{HELPER}.py"
    path.write_text(text)
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache", "--select",
                           "F821,F822,F401,F811,F841,E9,I", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_whole_helper_imports_only_what_the_one_file_did_and_lints_clean(tmp_path):
    text = assemble(SECTIONS)
    tree = ast.parse(text)
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert roots == {"torch", "torch_npu", "math", "functools", "logging", "os", "sys"}
    assert "Imports only torch, torch_npu, functools, logging, math, os and sys." in ast.get_docstring(tree)
    path = tmp_path / f"{HELPER}.py"
    path.write_text(text)
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache", "--select", "F,E9,I",
                           str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout


def test_the_sections_are_the_core_and_the_families_whose_rules_call_the_helper():
    called = {}
    for expected in _expected_outputs():
        names = used_names(expected.read_text())
        if names:
            called.setdefault(_family(expected.parent.name.split("_")[0]), set()).update(defining(names))
    assert set(called) == set(SECTIONS) - {"core"} == set(FAMILIES)
    for family, found in called.items():
        assert found <= {"core", family}, (family, found)  # a family's rules call its own section (and core)


def test_every_name_the_rules_write_and_the_parity_tooling_reads_is_defined():
    for expected in _expected_outputs():
        assert not unknown(used_names(expected.read_text())), expected
    core = sections()["core"].defines
    assert {"site_counts", "reset_site_counts", "SITES", "npu_glue"} <= core  # migrate parity, benchmarks
    assert "OBSERVER" in sections()["norm"].defines  # the attribute parity's observers set, read by _hooked


def test_a_name_is_defined_by_one_section_and_selects_it_with_what_it_needs():
    assert defining({"rotary_fits", "rotary_mul"}) == {"rotary"}
    assert defining({"can_fuse", "RMSNorm", "_record"}) == {"attention", "norm", "core"}
    text = helper_text({"rotary_fits", "rotary_mul"})
    assert split(text)[0].sections == ("core", "rotary")
    assert not top_level_names(ast.parse(text)) & sections()["attention"].defines


def test_used_names_reads_the_attributes_of_npu_glue_only():
    text = ("y = npu_glue.rotary_mul(x) if npu_glue.rotary_fits(x, site='a.py:1:NPU310') else x  # npu_glue.py\n"
            "z = my_npu_glue.sdpa(q) + self.npu_glue.can_fuse(q)\nfrom .npu_glue import npu_glue\n")
    assert used_names(text) == {"rotary_mul", "rotary_fits", "py"}
    assert unknown(used_names(text)) == {"py"}  # a comment's file name: no section, none selected
    notebook = '"source": ["out = npu_glue.sdpa(q, k, v)\\n"]'
    assert used_names(notebook) == {"sdpa"}


def test_the_header_names_the_version_and_sections_and_hashes_the_text_below():
    text = assemble(["norm"])
    header, body = split(text)
    assert header == Header(__version__, ("core", "norm"), digest(body))
    assert text.startswith(f"# npu-migrate {__version__} vendored this {HELPER}.py: sections core, norm; sha256 ")
    assert unedited(text) and ast.get_docstring(ast.parse(text)).startswith("Glue for code migrated")
    assert split("x = 1\n") == (None, "x = 1\n") and not unedited("x = 1\n")


@pytest.mark.parametrize("where", [0, 0.5, -2])
def test_a_one_character_edit_below_the_header_is_detected(where):
    text = assemble(["rotary"])
    header_end = text.index("\n") + 1
    at = header_end if where == 0 else (len(text) + where if where < 0 else header_end + int((len(text) - header_end) * where))
    edited = text[:at] + ("x" if text[at] != "x" else "y") + text[at + 1:]
    assert split(edited)[0] == split(text)[0] and not unedited(edited)


def test_the_readme_states_the_helpers_sizes():
    families = ", ".join(f"{label} ({lines(assemble([name]))})" for name, label in FAMILIES.items())
    first, rest = families.split(", ", 1)
    first = first.replace(")", " lines with the core)")
    *head, last = rest.split(", ")
    stated = (f"the core (value checks and the per-site record; {lines(assemble([]))} lines alone) and, per rule "
              f"family, {first}, {', '.join(head)} and {last}; all six sections make {lines(assemble(SECTIONS)):,} lines")
    assert len(SECTIONS) == 6
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert stated in readme, stated
