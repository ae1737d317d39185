"""Every dependency/launcher fixture: ``fixtures/files/<CODE>_<slug>/`` holds ``input/`` (a small
tree), ``expected/`` (the files that change, as they must be after the run; absent when nothing
changes) and ``diagnostics.txt`` (``path:line:col CODE action message`` per finding, empty when the
case must stay silent). Each case runs through the runner with only its code enabled, as
``migrate run --select CODE`` does; running it again on its output must change nothing."""

import shutil
from pathlib import Path

import pytest

from npu_migrate.migrate.discovery import discover
from npu_migrate.migrate.files.codes import DECLARATIONS
from npu_migrate.migrate.files.kinds import KINDS, kind_of
from npu_migrate.migrate.runner import run
from tests.snippets import builtin_table

FIXTURES = Path(__file__).parents[2] / "fixtures" / "files"
CASES = sorted(p for p in FIXTURES.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def table():
    return builtin_table()


def _run(tree: Path, code: str, table):
    files = discover(tree)
    return run(tree, files.python, table, select=[code], copied=files.other, isolate=False, jobs=1)


def _files(root: Path):
    return {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*") if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_file_fixture(case, table, tmp_path):
    code = case.name.split("_")[0]
    tree = tmp_path / "repo"
    shutil.copytree(case / "input", tree)
    result = _run(tree, code, table)
    assert not [r.error for r in result.files if r.status == "error"]

    found = [f"{f.path}:{f.line}:{f.col} {f.code} {f.action} {f.message}" for r in result.files for f in r.findings]
    wanted = [line for line in (case / "diagnostics.txt").read_text().splitlines() if line.strip()]
    assert found == wanted

    expected = _files(case / "expected") if (case / "expected").is_dir() else {}
    changed = {r.path: r.migrated for r in result.changed}
    assert changed == expected
    assert all(r.kind != "python" or r.path.endswith("setup.py") for r in result.changed), "Python code changed"

    for path, text in changed.items():
        (tree / path).write_text(text)
    again = _run(tree, code, table)
    assert not again.changed, f"not a fixed point: {[r.path for r in again.changed]}"
    assert not [f for f in again.findings if f.action == "rewritten"]


def test_every_code_has_its_example_and_every_kind_a_no_change_case():
    names = [c.name for c in CASES]
    for declared in DECLARATIONS:
        assert declared.example_dir in names, f"{declared.code}: no fixtures/files/{declared.example_dir}"
        example = FIXTURES / declared.example_dir
        codes = [line.split()[1] for line in (example / "diagnostics.txt").read_text().splitlines() if line.strip()]
        assert declared.code in codes, f"{example}/diagnostics.txt has no {declared.code}"
        assert (example / "expected").is_dir() == declared.rewrites, declared.code
    quiet = {kind_of(p.relative_to(case / "input").as_posix()) or (p.name == "setup.py" and "setup.py")
             for case in CASES if case.name.endswith("_nochange") for p in (case / "input").rglob("*") if p.is_file()}
    kinds = {k.name if not isinstance(k, str) else k for k in quiet if k}
    assert kinds >= {kind.name for kind in KINDS}, f"kinds without a no-change fixture: {sorted({k.name for k in KINDS} - kinds)}"
