"""Issue 14 item 1: the result cache changes nothing but the time, and never trusts its directory."""

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from npu_migrate.migrate.cache import Cache, salt
from npu_migrate.migrate.limits import Limits
from npu_migrate.migrate.rules import select_rules
from npu_migrate.migrate.runner import run
from npu_migrate.opmap import load_table
from npu_migrate.opmap.table import builtin_files

FIXTURES = Path(__file__).parents[2] / "fixtures" / "rules"
CASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def table():
    return load_table()


def _cache(directory, select=None):
    return Cache(directory, salt(builtin_files(), select_rules(select, None), select, None, Limits()))


def _run(table, paths, cache, select=None):
    return run(FIXTURES, paths, table, select=select, jobs=2, cache=cache)


def _dump(result):
    return [asdict(r) for r in result.files]


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


def test_a_warm_run_reads_the_cache_instead_of_migrating(table, tmp_path, monkeypatch):
    paths = [f"{case}/input.py" for case in CASES[:20]]
    cold = _dump(_run(table, paths, _cache(tmp_path)))
    from npu_migrate.migrate import engine

    def refuse(*args, **kwargs):
        raise AssertionError("migrated although cached")

    monkeypatch.setattr(engine.Engine, "_migrate", refuse)  # forked workers inherit it
    assert _dump(_run(table, paths, _cache(tmp_path))) == cold


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
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert "writable by other users" in unsafe(shared)
