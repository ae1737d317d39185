import subprocess

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
