import os
import subprocess

from npu_migrate.migrate.discovery import discover


def _tree(root, paths):
    for rel in paths:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x\n")


def test_walk_outside_git_skips_caches_venvs_and_gitignored(tmp_path):
    _tree(tmp_path, ["a.py", "pkg/b.py", "data.csv", ".gitignore", "run.log", "out/x.py", "pkg/out/y.py",
                     "__pycache__/a.pyc", "node_modules/m.js", "venv/pyvenv.cfg", "venv/lib/s.py", ".git/HEAD",
                     "reports/r.json", "docs/gen/z.py"])
    (tmp_path / ".gitignore").write_text("# comment\n*.log\nout/\n/docs/gen/*.py\n")
    os.symlink("pkg", tmp_path / "alias")
    files = discover(tmp_path, exclude=[tmp_path / "reports"])
    assert files.python == ["a.py", "pkg/b.py"]
    assert files.other == [".gitignore", "alias", "data.csv"]


def test_git_lists_tracked_and_untracked_but_not_ignored(tmp_path):
    _tree(tmp_path, ["a.py", "sub/.gitignore", "sub/keep.py", "sub/skip.py", "new.txt"])
    (tmp_path / "sub/.gitignore").write_text("skip.py\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "a.py"], cwd=tmp_path, check=True)
    (tmp_path / "a.py").unlink()  # deleted but still in the index
    _tree(tmp_path, ["b.py"])
    files = discover(tmp_path)
    assert files.python == ["b.py", "sub/keep.py"]
    assert files.other == ["new.txt", "sub/.gitignore"]
    assert discover(tmp_path / "sub").python == ["keep.py"]
