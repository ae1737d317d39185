import os
import subprocess

import pytest

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


def test_gitignore_negation_nested_files_and_directory_patterns_outside_git(tmp_path):
    """Issue 8 item 5: `data` with `!pkg/data` lost pkg/data/ (18 files) from the migrated tree."""
    _tree(tmp_path, ["data/raw.py", "pkg/__init__.py", *(f"pkg/data/m{i}.py" for i in range(18)),
                     "sub/keep.py", "sub/drop.py", "sub/deep/x.tmp", "sub/deep/y.py", "build/a.py", "b/build",
                     "logs/keep.log", "logs/a.log"])
    (tmp_path / ".gitignore").write_text("data\n!pkg/data\nbuild/\n*.log\n!logs/keep.log\n")
    (tmp_path / "sub/.gitignore").write_text("drop.py\n*.tmp\n")
    files = discover(tmp_path)
    assert [p for p in files.python if p.startswith("pkg/data/")] == sorted(f"pkg/data/m{i}.py" for i in range(18))
    assert "sub/keep.py" in files.python and "sub/deep/y.py" in files.python
    assert "b/build" in files.other  # a file: `build/` matches directories only
    assert "logs/keep.log" in files.other
    excluded = {e.path: e.reason for e in files.excluded}
    assert excluded == {"build/": "ignored by .gitignore (pattern 'build/')",
                        "data/": "ignored by .gitignore (pattern 'data')",
                        "logs/a.log": "ignored by .gitignore (pattern '*.log')",
                        "sub/deep/x.tmp": "ignored by sub/.gitignore (pattern '*.tmp')",
                        "sub/drop.py": "ignored by sub/.gitignore (pattern 'drop.py')"}


def _covered(files, rel):
    listed = {*files.python, *files.other}
    return rel in listed or any(rel == e.path or (e.path.endswith("/") and rel.startswith(e.path))
                                for e in files.excluded)


@pytest.mark.parametrize("in_git", [False, True])
def test_every_file_is_listed_or_excluded_with_a_reason(tmp_path, in_git):
    _tree(tmp_path, ["a.py", "x.log", "pkg/b.py", "pkg/__pycache__/b.pyc", "venv/pyvenv.cfg", "venv/lib/s.py",
                     "node_modules/m.js", "gen/out.py"])
    (tmp_path / ".gitignore").write_text("*.log\ngen/\nvenv/\nnode_modules/\n__pycache__/\n")
    if in_git:
        subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    files = discover(tmp_path)
    every = [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()]
    missing = [rel for rel in every if not _covered(files, rel)]
    assert not missing
    assert all(e.reason for e in files.excluded)


def test_fifos_are_excluded_with_a_reason(tmp_path):
    _tree(tmp_path, ["a.py"])
    os.mkfifo(tmp_path / "pipe")
    files = discover(tmp_path)
    assert [(e.path, e.reason.split(" (")[0]) for e in files.excluded] == [("pipe", "not a regular file")]
