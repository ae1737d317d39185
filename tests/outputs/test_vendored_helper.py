"""Issue 21 item 6: the helper a run writes beside migrated files holds the sections they call; an
unedited copy is upgraded in place, an edited one is kept (the files that need only what it defines
migrated beside it, NPU018; the others left unchanged, NPU011), and a re-run changes nothing.
``migrate run`` with the real rules on two small files: a rotary embedding (NPU310) and an RMSNorm
(NPU320)."""

import ast
import json

import pytest

from npu_migrate.migrate import __version__, exitcodes
from npu_migrate.migrate.helpers.assemble import assemble, split, unedited, used_names
from npu_migrate.migrate.helpers.sections import sections, top_level_names
from tests.cli.conftest import git, git_init, invoke, snapshot, write_tree

ROPE = '''import torch


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(q, cos, sin):
    return q * cos + rotate_half(q) * sin
'''
NORM = '''import torch


def norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
'''
HELPER = "pkg/npu_glue.py"


def _run(repo, tmp_path, name="out", *args):
    out, reports = tmp_path / name, tmp_path / f"{name}-reports"
    result = invoke(repo, "--out", out, "--report-dir", reports, "--no-cache", *args)
    return result, out, json.loads((reports / "report.json").read_text()), (reports / "changes.patch").read_text()


def _sections(path):
    header, _ = split(path.read_text())
    return header.sections


def _findings(report, code):
    return [(f["path"], f["message"]) for f in report["findings"] if f["code"] == code]


def _older(text):
    """``text`` as an older npu-migrate would have written it: another version in the header, the
    text below it (and so its hash) as it is."""
    return text.replace(f"npu-migrate {__version__} vendored", "npu-migrate 0.0.1 vendored", 1)


def test_a_package_that_only_rotates_gets_the_core_and_rotary_and_no_attention_code(tmp_path):
    repo = write_tree(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/rope.py": ROPE})
    result, out, report, _ = _run(repo, tmp_path)
    assert result.exit_code == 0, result.output
    text = (out / HELPER).read_text()
    migrated = (out / "pkg/rope.py").read_text()
    assert used_names(migrated) == {"rotary_fits", "rotary_mul"}
    assert _sections(out / HELPER) == ("core", "rotary") and unedited(text)
    defined = top_level_names(ast.parse(text))
    assert used_names(migrated) <= defined and not defined & sections()["attention"].defines
    assert text == assemble(["rotary"]) and report["new_files"] == [HELPER] and report["updated_files"] == []


def test_an_unedited_older_copy_is_upgraded_in_place_and_listed_as_the_helper(tmp_path):
    repo = write_tree(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/rope.py": ROPE,
                                          HELPER: _older(assemble(["rotary"]))})
    git_init(repo)
    result, out, report, patch = _run(repo, tmp_path)
    assert result.exit_code == 0, result.output
    assert (out / HELPER).read_text() == assemble(["rotary"])
    assert report["updated_files"] == [HELPER] and report["new_files"] == []
    assert f"--- a/{HELPER}\n+++ b/{HELPER}\n" in patch and "-# npu-migrate 0.0.1 vendored" in patch
    assert f"updated `{HELPER}`" in (tmp_path / "out-reports" / "report.md").read_text()
    git(repo, "apply", str(tmp_path / "out-reports" / "changes.patch"))
    assert snapshot(repo) == snapshot(out)


def test_an_unedited_copy_without_a_section_the_new_files_call_gets_it_and_keeps_its_own(tmp_path):
    repo = write_tree(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/rope.py": ROPE, HELPER: assemble(["mlp"])})
    result, out, report, _ = _run(repo, tmp_path)
    assert result.exit_code == 0, result.output
    assert _sections(out / HELPER) == ("core", "mlp", "rotary")  # mlp: called by files migrated before
    assert report["updated_files"] == [HELPER]


@pytest.mark.parametrize("edit", ["comment", "in a function"])
def test_an_edited_copy_that_defines_every_name_is_kept_and_the_files_migrated_with_a_warning(tmp_path, edit):
    mine = assemble(["rotary"])
    mine = mine + "# my note\n" if edit == "comment" else mine.replace("ROTARY_MAX_HEAD_DIM = 896", "ROTARY_MAX_HEAD_DIM = 512")
    repo = write_tree(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/rope.py": ROPE, HELPER: mine})
    result, out, report, patch = _run(repo, tmp_path)
    assert result.exit_code == 0, result.output
    assert (out / HELPER).read_text() == mine and HELPER not in patch
    assert "npu_glue.rotary_mul(" in (out / "pkg/rope.py").read_text()
    (warning,) = _findings(report, "NPU018")
    assert warning[0] == HELPER and "an edited copy" in warning[1] and "sections core, rotary" in warning[1]
    assert "warning:" in result.output and "NPU018" in result.output
    assert report["new_files"] == report["updated_files"] == []


def test_an_edited_copy_that_lacks_a_name_leaves_the_files_needing_it_unchanged(tmp_path):
    mine = assemble(["norm", "rotary"]).replace("def rotary_mul(", "def my_rotary_mul(")
    repo = write_tree(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/rope.py": ROPE, "pkg/norm.py": NORM,
                                          HELPER: mine})
    result, out, report, _ = _run(repo, tmp_path)
    assert result.exit_code == exitcodes.FILE_ERRORS
    files = {f["path"]: f for f in report["files"]}
    assert files["pkg/rope.py"]["status"] == "error" and (out / "pkg/rope.py").read_text() == ROPE
    assert "NPU011" in files["pkg/rope.py"]["error"] and "lacks rotary_mul;" in files["pkg/rope.py"]["error"]
    assert files["pkg/norm.py"]["status"] == "changed"  # it calls only what the copy defines
    assert (out / HELPER).read_text() == mine and [p for p, _ in _findings(report, "NPU018")] == [HELPER]


def test_a_copy_a_newer_version_wrote_is_kept(tmp_path):
    newer = assemble(["rotary"]).replace(f"npu-migrate {__version__} vendored", "npu-migrate 99.0 vendored", 1)
    repo = write_tree(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/rope.py": ROPE, HELPER: newer})
    result, out, report, _ = _run(repo, tmp_path)
    assert result.exit_code == 0, result.output
    assert (out / HELPER).read_text() == newer
    assert "newer than this one" in _findings(report, "NPU018")[0][1]


def test_a_rerun_is_a_fixed_point_and_a_file_added_later_keeps_the_sections_of_those_before(tmp_path):
    repo = write_tree(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/rope.py": ROPE})
    first, out, _, _ = _run(repo, tmp_path)
    assert first.exit_code == 0, first.output
    again, out2, report, patch = _run(out, tmp_path, "out2")
    assert again.exit_code == 0 and patch == "" and report["summary"]["files_changed"] == 0
    assert snapshot(out2) == snapshot(out)

    write_tree(out, {"pkg/norm.py": NORM})  # rope.py is migrated already: this run does not change it
    third, out3, report, _ = _run(out, tmp_path, "out3")
    assert third.exit_code == 0, third.output
    assert [f["path"] for f in report["files"] if f["status"] == "changed"] == ["pkg/norm.py"]
    assert _sections(out3 / HELPER) == ("core", "norm", "rotary") and report["updated_files"] == [HELPER]


def test_in_place_an_unedited_older_copy_is_upgraded_through_the_journal(tmp_path):
    repo = write_tree(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/rope.py": ROPE,
                                          HELPER: _older(assemble(["rotary"]))})
    git_init(repo)
    result = invoke(repo, "--in-place", "--report-dir", tmp_path / "r", "--no-cache")
    assert result.exit_code == 0, result.output
    assert (repo / HELPER).read_text() == assemble(["rotary"]) and "npu_glue.rotary_mul(" in (repo / "pkg/rope.py").read_text()
    report = json.loads((tmp_path / "r/report.json").read_text())
    assert HELPER in report["written"]["files"] and report["updated_files"] == [HELPER]
    reverted = invoke(repo, "--in-place", "--revert", "--report-dir", tmp_path / "r")
    assert reverted.exit_code == 0, reverted.output
    assert (repo / HELPER).read_text() == _older(assemble(["rotary"])) and (repo / "pkg/rope.py").read_text() == ROPE
