"""Everything the vendor's migration tools rewrite, patch or advise about, we rewrite or report
(issue 27): one snippet per row of ``opmap/reference/vendor_migration_rows.txt``
(``fixtures/device_parity/snippets.yaml``), all migrated by one ``migrate run`` (the runner), and the
lines each snippet marks ``# <-`` must get the verdict the snippet expects: rewritten, reported, or
native (no change needed: the op table has a ``native`` record that says why). A row without a
snippet fails. Snippets marked ``runs`` are executed: the original on the emulated CUDA device and
the migrated one on the emulated NPU must compute the same (``runs: migrated``: only the migrated
one runs, where the CUDA emulation lacks what the original needs)."""

from pathlib import Path

import pytest
import torch
import yaml

from npu_migrate import kernels
from npu_migrate.migrate.runner import run
from npu_migrate.opmap.reference import vendor_rows
from tests.snippets import builtin_table

SNIPPETS = yaml.safe_load((Path(__file__).parents[2] / "fixtures" / "device_parity" / "snippets.yaml").read_text())
BY_ROW = {snippet["row"]: snippet for snippet in SNIPPETS}
ROWS = vendor_rows()
IDS = [f"{i:03}-{row.api}-{row.match}" for i, row in enumerate(ROWS)]
VERDICTS = ("rewritten", "reported", "native")


def test_every_vendor_row_has_one_snippet_and_every_snippet_a_row():
    keys = [row.key for row in ROWS]
    assert len(set(keys)) == len(keys), "a vendor row is listed twice"
    assert len(BY_ROW) == len(SNIPPETS), "two snippets for one row"
    missing = [key for key in keys if key not in BY_ROW]
    assert not missing, f"vendor rows without a snippet in fixtures/device_parity/snippets.yaml: {missing}"
    assert not [row for row in BY_ROW if row not in keys], "snippets of rows the reference does not list"
    assert all(snippet["expect"] in VERDICTS and "# <-" in snippet["source"] for snippet in SNIPPETS)


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """row key -> (FileResult, sites): every snippet migrated by one run per selection."""
    table, results = builtin_table(), {}
    for select in (None, "NPU4"):
        root = tmp_path_factory.mktemp(f"snippets_{select or 'default'}")
        names = {}
        for index, row in enumerate(ROWS):
            if BY_ROW[row.key].get("select") == select:
                names[f"row_{index:03}.py"] = row.key
                (root / f"row_{index:03}.py").write_text(BY_ROW[row.key]["source"])
        outcome = run(root, sorted(names), table, select=[select] if select else None, jobs=1, isolate=False)
        for result in outcome.files:
            results[names[result.path]] = result
    return table, results


def sites(source: str):
    return [n for n, line in enumerate(source.splitlines(), 1) if line.rstrip().endswith("# <-")]


def verdicts(table, result, line: int, api: str) -> set:
    """What the run did at ``line``: rewritten and/or reported, else native (the op table says no
    change is needed, and why), else silent."""
    actions = {f.action for f in result.findings if f.line == line}
    if actions:
        return actions
    record = table.exact(api)
    return {"native"} if record is not None and record.status == "native" and record.summary else {"silent"}


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_migrate_run_rewrites_or_reports_the_row(row, migrated):
    table, results = migrated
    snippet, result = BY_ROW[row.key], migrated[1][row.key]
    assert result.status in ("changed", "unchanged", "skipped"), (result.status, result.error)
    lines = sites(snippet["source"])
    got = [verdicts(table, result, line, row.api) for line in lines]
    assert snippet["expect"] in set().union(*got) and {"silent"} not in got, \
        (got, [(f.line, f.code, f.message) for f in result.findings])
    if snippet["expect"] == "rewritten":
        before, after = snippet["source"].splitlines(), result.migrated.splitlines()
        assert not any(before[line - 1] in after for line, v in zip(lines, got) if "rewritten" in v), \
            "a line reported as rewritten is still in the output"


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu())
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def _check(source: str):
    namespace = {}
    exec(compile(source, "<snippet>", "exec"), namespace)
    return namespace["check"]()


RUNS = [row for row in ROWS if BY_ROW[row.key].get("runs")]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("row", RUNS, ids=[IDS[ROWS.index(row)] for row in RUNS])
def test_the_migrated_snippet_computes_what_the_original_does(row, migrated):
    result, both = migrated[1][row.key], BY_ROW[row.key]["runs"] is True
    assert result.status == "changed"
    if both:
        torch.manual_seed(0)
        with kernels.emulate_cuda():
            expected = _check(BY_ROW[row.key]["source"])
    torch.manual_seed(0)
    with kernels.emulate() as active:
        if not active:
            pytest.skip("a real torch_npu is installed; the emulator stays off")
        got = _check(result.migrated)
    assert got is not None and (not both or same(got, expected)), (got, expected if both else None)
