import os

import pytest

from npu_migrate.migrate.outputs.atomic import link_atomic, write_atomic


def test_replaces_and_keeps_the_mode(tmp_path):
    target = tmp_path / "run.py"
    target.write_text("old")
    os.chmod(target, 0o755)
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new" and target.stat().st_mode & 0o777 == 0o755
    assert os.listdir(tmp_path) == ["run.py"]


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "a.py"
    target.write_text("old")
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        write_atomic(target, b"new")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["a.py"]


def test_creates_directories_and_links(tmp_path):
    write_atomic(tmp_path / "d/e/f.txt", b"x")
    link_atomic(tmp_path / "d/link", "e/f.txt")
    assert (tmp_path / "d/link").read_bytes() == b"x" and os.readlink(tmp_path / "d/link") == "e/f.txt"
