import subprocess
import sys

import pytest

from npu_migrate.migrate.outputs.changes import Change
from npu_migrate.migrate.outputs.patch import apply_command, build_patch


def _apply(tmp_path, files, patch):
    for rel, text in files.items():
        (tmp_path / rel).write_text(text, newline="")
    (tmp_path / "p.patch").write_text(patch, newline="")
    done = subprocess.run(["git", "apply", "p.patch"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_missing_final_newline_is_marked_on_both_sides():
    patch = build_patch([Change("a.py", "x = 1\ny = 2", "x = 1\ny = 3")])
    assert patch.endswith("-y = 2\n\\ No newline at end of file\n+y = 3\n\\ No newline at end of file\n")


def test_new_file_is_diffed_against_dev_null():
    patch = build_patch([Change("pkg/h.py", None, "a\nb\n")])
    assert patch == "diff --git a/pkg/h.py b/pkg/h.py\nnew file mode 100644\n--- /dev/null\n+++ b/pkg/h.py\n@@ -0,0 +1,2 @@\n+a\n+b\n"


def test_git_applies_no_newline_crlf_and_new_files(tmp_path):
    old = {"a.py": "x = 1\ny = 2", "b.py": "p = 1\r\nq = 2\r\n", "c.py": "s = '\x0c'\nt = 1\n"}
    new = {"a.py": "x = 1\ny = 3\n", "b.py": "p = 1\r\nq = 3\r\n", "c.py": "s = '\x0c'\nt = 2\n", "h.py": "z"}
    patch = build_patch([Change(p, old.get(p), new[p]) for p in sorted(new)])
    _apply(tmp_path, old, patch)
    for rel, text in new.items():
        assert (tmp_path / rel).read_bytes() == text.encode(), rel


def test_apply_command_works_for_a_path_below_the_top_of_a_git_tree(tmp_path):
    sub = tmp_path / "repo/sub"
    sub.mkdir(parents=True)
    (sub / "x.py").write_text("a = 1\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path / "repo", check=True)
    patch = tmp_path / "p.patch"
    patch.write_text(build_patch([Change("x.py", "a = 1\n", "a = 2\n")]))
    command = apply_command(sub, patch)
    assert "--directory=sub" in command
    subprocess.run(command, shell=True, check=True)
    assert (sub / "x.py").read_text() == "a = 2\n"


def test_vendored_helpers_are_summarised_and_the_rest_parsed_with_patch_line_numbers():
    from npu_migrate.migrate.helpers import is_helper_file
    from npu_migrate.migrate.outputs.hunks import PatchError, parse_patch

    patch = build_patch([Change("a/model.py", "x = 1\n", "x = 2\n"), Change("a/npu_glue.py", None, "h\n" * 5),
                         Change("b/npu_glue.py", "mine\n", "changed\n"), Change("b/model.py", "y = 1\n", "y = 3\n")])
    diffs = parse_patch(patch, vendored=is_helper_file)
    assert [(d.path, d.vendored_lines) for d in diffs] == [
        ("a/model.py", None), ("a/npu_glue.py", 5), ("b/npu_glue.py", None), ("b/model.py", None)]
    assert not diffs[1].hunks and [line.text for line in diffs[3].hunks[0].lines] == ["y = 1", "y = 3"]
    assert [(d.path, len(d.hunks)) for d in parse_patch(patch)] == [(d.path, 1) for d in diffs]  # all read in full
    broken = patch.replace("+y = 3", "?y = 3")
    with pytest.raises(PatchError, match=f"line {broken.splitlines().index('?y = 3') + 1}:"):
        parse_patch(broken, vendored=is_helper_file)


@pytest.mark.slow
def test_the_review_page_summarises_the_vendored_helper(tmp_path):
    package = tmp_path / "repo" / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "norm.py").write_text(
        "import torch\n\n\ndef norm(x, w, eps):\n"
        "    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))\n")
    done = subprocess.run([sys.executable, "-m", "npu_migrate.migrate", "run", str(tmp_path / "repo"), "--out",
                           str(tmp_path / "out"), "--report-dir", str(tmp_path / "rep"), "--no-cache"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    helper_lines = (tmp_path / "out" / "pkg" / "npu_glue.py").read_text().count("\n")
    page = (tmp_path / "rep" / "report.html").read_text()
    assert f"vendored helper, {helper_lines} lines" in page
    assert "def rms_norm_fits" not in page and "rms_norm_fits" in page  # the helper's text is not on the page
    assert "+++ b/pkg/npu_glue.py" in (tmp_path / "rep" / "changes.patch").read_text()


@pytest.mark.parametrize("text", ["", "a", "a\n", "a\nb", "\n\n", "p = 1\r\nq = 2\r\n", "x\n" * 1000])
def test_a_new_file_is_diffed_as_difflib_diffs_it(text):
    """New files (a vendored helper in every migrated directory) skip the line matching, not its output."""
    import difflib

    from npu_migrate.migrate.diffs import _lines

    reference = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                        for line in list(difflib.unified_diff([], _lines(text), n=3))[2:])
    assert build_patch([Change("h.py", None, text)]).split("+++ b/h.py\n", 1)[1] == reference
