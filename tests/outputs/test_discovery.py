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


# -- issue 25: scripts found by content; paths over PATH_MAX reported ------------------------------------
@pytest.mark.parametrize("name, head, mode, python", [
    ("train", b"#!/usr/bin/env python3\nimport torch\n", 0o755, True),
    ("serve", b"#!/usr/bin/python3.11 -u\r\nimport torch\r\n", 0o644, True),
    ("tool", b"#! /usr/bin/env -S python3 -X dev\n", 0o755, True),
    ("unset", b"#!/usr/bin/env -u PYTHONPATH python\n", 0o755, True),
    ("launch.sh", b"#!/usr/bin/env python\n", 0o755, True),  # executable: its suffix does not decide
    ("notes.txt", b"#!/usr/bin/env python\n", 0o644, False),  # a suffix and not executable: not a script
    ("build", b"#!/bin/bash\npython train.py\n", 0o755, False),
    ("ruby", b"#!/opt/pythonic/bin/ruby\n", 0o755, False),
    ("data", b"import torch\n", 0o644, False),  # no #! line: nothing says it is Python
])
def test_python_scripts_are_found_by_their_shebang(tmp_path, name, head, mode, python):
    (tmp_path / name).write_bytes(head)
    (tmp_path / name).chmod(mode)
    files = discover(tmp_path)
    assert (name in files.python) is python and (name in files.other) is not python


def test_a_script_link_or_fifo_is_never_read_for_its_shebang(tmp_path):
    (tmp_path / "real").write_bytes(b"#!/usr/bin/env python\n")
    os.symlink("real", tmp_path / "alias")
    os.mkfifo(tmp_path / "pipe")  # opening it for its first line would block
    files = discover(tmp_path)
    assert files.python == ["real"] and "alias" in files.other


def _deep(root, levels=22, name="d" * 200):
    """root/ddd.../ddd.../deep.py, past PATH_MAX, made one directory at a time (relative opens)."""
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(levels):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
        out = os.open("deep.py", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, b"import torch\nx = torch.zeros(3).cuda()\n")
        os.close(out)
    finally:
        os.close(fd)
    return name


@pytest.mark.parametrize("in_git", [False, True])
def test_paths_over_path_max_are_reported_and_the_rest_goes_on(tmp_path, in_git):
    from npu_migrate.migrate.discovery import PATH_MAX

    _tree(tmp_path, ["a.py"])
    name = _deep(tmp_path)
    if in_git:
        subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    files = discover(tmp_path)
    assert files.python == ["a.py"] and not files.unlistable
    (long,) = files.too_long
    assert long.path.startswith(name) and "PATH_MAX" in long.reason  # (git cuts its warning's path short)
    if not in_git:
        assert long.path.endswith("/") and len(os.fsencode(str(tmp_path / long.path))) >= PATH_MAX
