"""The non-Python engine: every file becomes one result, whatever is in it; suppressions, overlaps,
invalid output and bad input are findings, never exceptions."""

import pytest

from npu_migrate.migrate.files.base import Facts, FileKind, TextEdit
from npu_migrate.migrate.files.engine import migrate_file
from npu_migrate.migrate.files.kinds import BY_NAME, kind_of
from tests.snippets import builtin_table


@pytest.fixture(scope="module")
def table():
    return builtin_table()


class Clashing(FileKind):
    """Two sites editing the same characters, and one inserting at the end."""

    name = "clashing"
    declares_packages = True

    def matches(self, path, head=b""):
        return False

    def scan(self, scan):
        scan.rewrite(0, "NPU221", "first", [TextEdit(0, 3, "AAA")], target="AAA")
        scan.rewrite(1, "NPU222", "second", [TextEdit(1, 2, "B")], target="B")
        scan.rewrite(len(scan.text), "NPU223", "third", [TextEdit(len(scan.text), len(scan.text), "!")], target="!")


class Breaking(Clashing):
    name = "breaking"

    def scan(self, scan):
        scan.rewrite(0, "NPU221", "breaks it", [TextEdit(0, 1, "[")], target="[")

    def problem(self, text, path=""):
        return "unbalanced" if text.startswith("[") else None


def test_overlapping_edits_become_not_applied_findings(table):
    result = migrate_file("x.txt", b"xyz", Clashing(), table)
    assert result.migrated == "AAA!"
    assert [(f.code, f.action) for f in result.findings] == [("NPU221", "rewritten"), ("NPU006", "reported"),
                                                            ("NPU223", "rewritten")]
    assert "NPU222 rewrite not applied" in result.findings[1].message


def test_an_output_that_would_not_parse_is_refused(table):
    result = migrate_file("x.txt", b"abc", Breaking(), table)
    assert result.status == "error" and result.findings[0].code == "NPU004" and result.migrated is None


def test_bad_input_is_an_error_result_with_its_kind(table):
    kind = kind_of("pyproject.toml")
    broken = migrate_file("pyproject.toml", b"[project]\ndeps [\n", kind, table)
    assert (broken.status, broken.kind, broken.findings[0].code, broken.findings[0].line) == ("error", "pyproject",
                                                                                            "NPU017", 2)
    latin = migrate_file("requirements.txt", "torch\n# caf\xe9\n".encode("latin-1"), kind_of("requirements.txt"), table)
    assert latin.status == "error" and latin.findings[0].code == "NPU002"


def test_a_crashing_scan_is_an_error_not_an_exception(table, monkeypatch):
    kind = kind_of("requirements.txt")
    monkeypatch.setattr(type(kind), "scan", lambda self, scan: 1 / 0)
    result = migrate_file("requirements.txt", b"torch\n", kind, table)
    assert result.status == "error" and result.findings[0].code == "NPU003" and "ZeroDivisionError" in result.error


def test_suppression_comments_keep_a_site_as_it_is(table):
    text = b"export CUDA_VISIBLE_DEVICES=0  # npu-migrate: ignore[NPU221]\nexport NCCL_SOCKET_IFNAME=eth0\n"
    result = migrate_file("run.sh", text, kind_of("run.sh"), table)
    assert [(f.code, f.action) for f in result.findings] == [("NPU221", "suppressed"), ("NPU222", "rewritten")]
    assert result.migrated.splitlines() == ["export CUDA_VISIBLE_DEVICES=0  # npu-migrate: ignore[NPU221]",
                                            "export HCCL_SOCKET_IFNAME=eth0"]


def test_a_launcher_without_any_trigger_is_skipped_and_a_dependency_file_never_is(table):
    assert migrate_file("run.sh", b"python train.py\n", kind_of("run.sh"), table).status == "skipped"
    result = migrate_file("requirements.txt", b"numpy\n", kind_of("requirements.txt"), table)
    assert result.status == "unchanged" and [r.name for r in result.requirements] == ["numpy"]


def test_torch_npu_is_added_only_where_the_code_imports_it(table):
    kind = kind_of("requirements.txt")
    without = migrate_file("requirements.txt", b"torch==2.6.0\n", kind, table, Facts(imports_torch_npu=False))
    with_npu = migrate_file("requirements.txt", b"torch==2.6.0\n", kind, table, Facts(imports_torch_npu=True))
    assert without.status == "unchanged" and not without.findings
    assert with_npu.migrated == "torch==2.6.0\ntorch-npu==2.6.0.post5\n"


@pytest.mark.parametrize("path, kind", [
    ("requirements.txt", "requirements"), ("requirements/dev.txt", "requirements"), ("dev-requirements.in", "requirements"),
    ("constraints.txt", "requirements"), ("pyproject.toml", "pyproject"), ("setup.cfg", "setup.cfg"),
    ("environment.yml", "conda"), ("envs/environment-cuda.yaml", "conda"), ("Dockerfile", "dockerfile"),
    ("docker/Dockerfile.gpu", "dockerfile"), ("serve.Dockerfile", "dockerfile"), ("scripts/train.sh", "shell"),
    ("jobs/train.slurm", "shell"), ("Makefile", "makefile"), ("rules.mk", "makefile"), (".env", "dotenv"),
    ("config/prod.env", "dotenv"), ("README.md", None), ("setup.py", None), ("docs/requirements.md", None),
    ("data/train.txt", None)])
def test_kinds_by_name(path, kind):
    found = kind_of(path)
    assert (found.name if found else None) == kind


def test_an_extensionless_script_is_read_by_its_shebang():
    assert kind_of("bin/launch", b"#!/usr/bin/env bash\nexport X=1\n").name == "shell"
    assert kind_of("bin/launch", b"#!/usr/bin/env python3\n") is None
    assert BY_NAME["setup.py"].matches("setup.py") is False  # a Python file: scanned after the Python rules
