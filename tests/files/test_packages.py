"""The package decisions every dependency file kind shares (migrate/files/packages.py), on
requirements files: the release rule of a ``compatible`` package against pins and upper bounds."""

import pytest

from tests import snippets


@pytest.mark.slow
@pytest.mark.parametrize("line, reported", [
    ("deepspeed==0.9.2", True), ("deepspeed==0.9.3", False),  # deepspeed's rule: >=0.9.3
    ("deepspeed<0.9", True), ("deepspeed<0.9.3", True), ("deepspeed<=0.9.2", True), ("deepspeed~=0.8.0", True),
    ("deepspeed<=0.9.3", False), ("deepspeed~=0.9.0", False), ("deepspeed~=0.8", False), ("deepspeed<1", False),
    ("deepspeed>=0.8", False), ("deepspeed", False),
])
def test_a_release_rule_flags_pins_and_upper_bounds_that_exclude_every_npu_release(line, reported):
    result = snippets.migrate(f"{line}\n", "requirements.txt")
    assert [f.code for f in result.findings] == (["NPU136"] if reported else [])
    assert [r.status for r in result.requirements] == ["compatible"]  # still a row of the matrix


@pytest.mark.parametrize("line, code", [
    ("./wheels/flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl", "NPU131"),
    ("https://example.org/whl/torch-2.4.0+cu121-cp311-cp311-linux_x86_64.whl", "NPU131"),
    ("xformers-0.0.27.tar.gz", "NPU130"),
])
def test_wheel_and_archive_paths_are_declarations_with_their_version(line, code):
    result = snippets.migrate(f"{line}\n", "requirements.txt")
    assert [f.code for f in result.findings] == [code]


def test_an_empty_value_in_a_dotenv_file_is_a_value():
    result = snippets.migrate('API_HOST=\nKEY=""\nCUDA_VISIBLE_DEVICES=\n', ".env", status="unchanged")
    assert [(f.line, f.code, f.action) for f in result.findings] == [(3, "NPU221", "reported")]  # "" is no device list
