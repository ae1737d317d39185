"""Issue 14 item 1: the result cache changes nothing but the time, and never trusts its directory."""

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from npu_migrate.migrate.cache import Cache, salt
from npu_migrate.migrate.limits import Limits
from npu_migrate.migrate.rules import select_rules
from npu_migrate.migrate.runner import run
from npu_migrate.opmap.table import builtin_files
from tests.snippets import builtin_table

FIXTURES = Path(__file__).parents[2] / "fixtures" / "rules"
CASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def table():
    return builtin_table()


def _cache(directory, select=None):
    return Cache(directory, salt(builtin_files(), select_rules(select, None), select, None, Limits()))


def _run(table, paths, cache, select=None):
    return run(FIXTURES, paths, table, select=select, jobs=2, cache=cache)


def _dump(result):
    """The results as data, each changed file with its part of the patch (made in the worker for a file
    migrated, from the stored text when the patch is made for a cached one)."""
    from npu_migrate.migrate.outputs.changes import Change
    from npu_migrate.migrate.outputs.patch import file_diff

    return [{**asdict(r), "diff": file_diff(Change(r.path, r.original, r.migrated, diff=r.diff))
             if r.status == "changed" else r.diff} for r in result.files]


@pytest.mark.slow
def test_rule_fixtures_cold_and_warm_are_byte_for_byte_equal(table, tmp_path):
    """Every rule fixture, each with only its code enabled (as the fixture test runs it)."""
    by_code = {}
    for case in CASES:
        by_code.setdefault(case.split("_")[0], []).append(f"{case}/input.py")
    for code, paths in by_code.items():
        uncached = _dump(_run(table, paths, None, [code]))
        cold = _dump(_run(table, paths, _cache(tmp_path, [code]), [code]))
        warm = _dump(_run(table, paths, _cache(tmp_path, [code]), [code]))
        assert cold == uncached, code
        assert warm == uncached, code
    entries = list(tmp_path.rglob("*.json"))
    assert len(entries) >= len(CASES)


@pytest.mark.slow
def test_a_warm_run_reads_the_cache_instead_of_migrating(table, tmp_path, monkeypatch):
    paths = [f"{case}/input.py" for case in CASES[:20]]
    cold = _dump(_run(table, paths, _cache(tmp_path)))
    from npu_migrate.migrate import engine

    def refuse(*args, **kwargs):
        raise AssertionError("migrated although cached")

    monkeypatch.setattr(engine.Engine, "_migrate", refuse)  # forked workers inherit it
    assert _dump(_run(table, paths, _cache(tmp_path))) == cold


@pytest.mark.slow
def test_no_worker_is_started_when_every_result_is_cached(table, tmp_path, monkeypatch):
    """Issue 23 item 2: the parent looks the files up; the pool starts only for files it lacks."""
    paths = [f"{case}/input.py" for case in CASES[:20]]
    cold = _dump(_run(table, paths, _cache(tmp_path)))
    from npu_migrate.migrate import runner

    def refuse(*args, **kwargs):
        raise AssertionError("workers started although every result is cached")

    monkeypatch.setattr(runner, "supervise", refuse)
    assert _dump(run(FIXTURES, paths, lambda: refuse(), jobs=2, cache=_cache(tmp_path))) == cold


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncate", "garbage", "foreign", "wrong_types", "other_key", "checksum"])
def test_damaged_or_foreign_entries_are_ignored(table, tmp_path, damage):
    paths = [f"{case}/input.py" for case in CASES if case.startswith("NPU203")]
    reference = _dump(_run(table, paths, None))
    _run(table, paths, _cache(tmp_path))
    entries = sorted(tmp_path.rglob("*.json"))
    assert entries
    for entry in entries:
        body = json.loads(entry.read_text())
        if damage == "truncate":
            entry.write_text(entry.read_text()[:40])
        elif damage == "garbage":
            entry.write_bytes(b"\xff\xfe\x00not json")
        elif damage == "foreign":
            body["format"] = "something-else"
            entry.write_text(json.dumps(body))
        elif damage == "wrong_types":
            body["result"]["findings"] = [{"code": 1}]
            entry.write_text(json.dumps(body))
        elif damage == "other_key":
            body["key"] = "0" * 64
            entry.write_text(json.dumps(body))
        elif damage == "checksum":  # a plausible edit of the migrated text, without the checksum
            if body["result"]["migrated"]:
                body["result"]["migrated"] = "import os\nos.system('echo owned')\n"
            body["result"]["status"] = "changed"
            entry.write_text(json.dumps(body))
    assert _dump(_run(table, paths, _cache(tmp_path))) == reference


def test_the_key_changes_with_the_options_and_the_op_table(tmp_path):
    rules = select_rules(None, None)
    base = salt(builtin_files(), rules, None, None, Limits())
    assert base == salt(builtin_files(), rules, None, None, Limits())
    assert base != salt(builtin_files(), select_rules(["NPU2"], None), ["NPU2"], None, Limits())
    assert base != salt(builtin_files(), rules, None, ["NPU101"], Limits())
    assert base != salt(builtin_files(), rules, None, None, Limits(max_bytes=10))
    extra = tmp_path / "extra.yaml"
    extra.write_text("[]\n")
    with_extra = salt([*builtin_files(), extra], rules, None, None, Limits())
    extra.write_text("# changed\n[]\n")
    assert with_extra != salt([*builtin_files(), extra], rules, None, None, Limits())


def test_a_cache_directory_others_can_write_is_not_used(tmp_path):
    from npu_migrate.migrate.cache import unsafe

    assert unsafe(tmp_path / "mine") is None
    assert (tmp_path / "mine").stat().st_mode & 0o777 == 0o700
    open_to_all = tmp_path / "open_to_all"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    assert "writable by other users" in unsafe(open_to_all)


# -- issue 25 item 1: a cache that cannot be used against its owner ------------------------------------
INJECTED = "import os\nos.system('echo owned')\n"


def _npu203(table, tmp_path):
    paths = [f"{case}/input.py" for case in CASES if case.startswith("NPU203")]
    reference = _dump(_run(table, paths, None))
    cache = _cache(tmp_path / "cache")
    _run(table, paths, cache)
    entries = sorted((tmp_path / "cache").rglob("*.json"))
    assert entries
    return paths, reference, cache, entries


def _forge(entry: Path, cache) -> None:
    """What a writer with this user's key could do: replace the migrated text and sign it."""
    from npu_migrate.migrate.cache import _signature

    body = json.loads(entry.read_text())
    body["result"]["migrated"] = INJECTED
    body["result"]["status"] = "changed"
    body["signature"] = _signature(cache.secret, body["result"])
    entry.write_text(json.dumps(body))


def _injected(result) -> bool:
    return any(f["migrated"] == INJECTED for f in result)


@pytest.mark.slow
def test_a_signed_entry_of_this_user_is_used(table, tmp_path):
    """The forgery below is effective when nothing refuses it: the tests that follow mean something."""
    paths, _, cache, entries = _npu203(table, tmp_path)
    _forge(entries[0], cache)
    assert _injected(_dump(_run(table, paths, _cache(tmp_path / "cache"))))


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["unsigned", "others_can_write", "directory_others_can_write", "symlink", "fifo",
                                    "dev_zero", "oversized", "other_owner"])
def test_entries_someone_else_could_have_written_are_refused(table, tmp_path, attack):
    import os

    paths, reference, cache, entries = _npu203(table, tmp_path)
    for entry in entries:
        if attack == "unsigned":  # the old plain checksum, recomputed by the attacker
            body = json.loads(entry.read_text())
            body["result"]["migrated"], body["result"]["status"] = INJECTED, "changed"
            body["signature"] = __import__("hashlib").sha256(json.dumps(body["result"]).encode()).hexdigest()
            entry.write_text(json.dumps(body))
            continue
        _forge(entry, cache)
        if attack == "others_can_write":
            entry.chmod(0o666)
        elif attack == "directory_others_can_write":
            entry.parent.chmod(0o777)
        elif attack == "symlink":
            elsewhere = tmp_path / "elsewhere" / entry.name
            elsewhere.parent.mkdir(exist_ok=True)
            entry.rename(elsewhere)
            entry.symlink_to(elsewhere)
        elif attack == "fifo":
            entry.unlink()
            os.mkfifo(entry)
        elif attack == "dev_zero":
            entry.unlink()
            entry.symlink_to("/dev/zero")
        elif attack == "oversized":
            body = json.loads(entry.read_text())
            body["padding"] = " " * (cache.max_entry_bytes + 1)  # signed and valid, but over the bound
            entry.write_text(json.dumps(body))
        elif attack == "other_owner":
            if os.geteuid() != 0:
                pytest.skip("giving a file to another user needs root")
            os.chown(entry, 65534, 65534)
    result = _dump(_run(table, paths, _cache(tmp_path / "cache")))
    assert not _injected(result)
    assert result == reference


@pytest.mark.slow
def test_cache_directories_are_private_whatever_the_umask(table, tmp_path):
    import os

    home_cache = tmp_path / "home-cache"
    home_cache.mkdir(mode=0o755)
    previous = os.umask(0)
    try:
        _npu203(table, home_cache)
    finally:
        os.umask(previous)
    made = [p for p in (home_cache / "cache").rglob("*")]
    assert any(p.is_dir() for p in made) and any(p.name == "key" for p in made)
    for path in [home_cache / "cache", *made]:
        mode = path.stat().st_mode & 0o777
        if path.is_dir():
            assert mode == 0o700, path
        else:
            assert mode & 0o077 == 0, path  # entries and the key: the user's alone


@pytest.mark.slow
def test_the_patch_and_the_tree_come_from_the_one_stored_text(table, tmp_path):
    """Entries keep no diff: a cached result's patch is made from its migrated text."""
    from npu_migrate.migrate.outputs.changes import collect_changes
    from npu_migrate.migrate.outputs.patch import build_patch

    paths, reference, cache, entries = _npu203(table, tmp_path)
    assert all("diff" not in json.loads(e.read_text())["result"] for e in entries)
    _forge(entries[0], cache)
    warm = _run(table, paths, _cache(tmp_path / "cache"))
    (forged,) = [r for r in warm.files if r.migrated == INJECTED]
    assert forged.diff is None  # nothing but the stored text: the patch makes its part from it
    assert "+os.system('echo owned')" in build_patch(collect_changes(warm))
