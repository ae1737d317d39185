"""A team turns one fusion off by configuration: an op-table record (``--opmap``) with a status other
than ``fused`` for a fused API keeps its sites as they are and reports them."""

import textwrap

from npu_migrate.opmap import load_table
from tests import snippets
import pytest

SOURCE = textwrap.dedent("""
    import math
    import torch
    import torch.nn.functional as F

    def attend(q, k, v):
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v)
        return out

    def library(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)
""").encode()


def _override(tmp_path, api, code):
    path = tmp_path / "off.yaml"
    path.write_text(f"- api: {api}\n  status: native\n  code: {code}\n  summary: turned off by this team\n")
    return [path]


@pytest.mark.slow
def test_by_default_both_attentions_are_fused():
    result = snippets.migrate(SOURCE, "m.py")
    assert sorted((f.code, f.action) for f in result.findings) == [("NPU301", "rewritten"), ("NPU302", "rewritten")]


@pytest.mark.slow
def test_a_native_status_turns_one_fusion_off(tmp_path):
    table = load_table(_override(tmp_path, "pattern.attention.eager", "NPU302"))
    result = snippets.migrate(SOURCE, "m.py", table=table)
    actions = {f.code: f for f in result.findings}
    assert actions["NPU301"].action == "rewritten"  # the other fusion is untouched
    assert actions["NPU302"].action == "reported"
    assert "op table sets pattern.attention.eager to status native" in actions["NPU302"].message
    assert "npu_glue.fusion_attention(" not in result.migrated.split("def library")[0]


@pytest.mark.slow
def test_turning_off_sdpa_keeps_the_call(tmp_path):
    table = load_table(_override(tmp_path, "torch.nn.functional.scaled_dot_product_attention", "NPU301"))
    result = snippets.migrate(SOURCE, "m.py", table=table)
    assert "F.scaled_dot_product_attention(q, k, v)" in result.migrated
    assert {f.code: f.action for f in result.findings}["NPU301"] == "reported"
