"""The residual pass: a component no rule rewrote or reported gets its family's report, with the
form seen and a plan; a component a rule handled, and code that only looks like one, get none."""

import textwrap

import pytest

from npu_migrate.migrate.engine import build_engine
from npu_migrate.opmap import load_table


@pytest.fixture(scope="module")
def engine():
    return build_engine(load_table())


def residual(engine, source):
    result = engine.migrate("m.py", textwrap.dedent(source).encode())
    assert result.status != "error", result.error
    return [f for f in result.findings if "form seen" in f.message], result


# Components written in forms no fused rule reads (yet): each must be reported, never silent.
UNREAD = {
    "NPU311": """
        import torch

        def rope(x, freqs):
            y = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2)) * freqs
            z = y.real
            return z
    """,
    "NPU321": """
        import torch

        def norm(x, w, eps: float):
            squares = torch.square(x)
            ms = squares.mean(dim=(-2, -1), keepdim=True)
            return w * x * torch.rsqrt(ms + eps)
    """,
    "NPU341": """
        import torch

        def route(logits, k):
            scores = logits.sigmoid()
            weights, experts = torch.topk(scores.flatten(), k)
            return weights, experts
    """,
}


@pytest.mark.parametrize("code", sorted(UNREAD))
def test_a_component_in_an_unread_form_is_reported_with_a_plan(engine, code):
    found, result = residual(engine, UNREAD[code])
    families = {f.code for f in result.findings}
    assert code in families, [f"{f.code} {f.message}" for f in result.findings]
    for finding in (f for f in result.findings if f.code == code):
        assert finding.action == "reported" and finding.fallback is not None and finding.fallback.detail


LOOK_ALIKES = """
import torch
import torch.nn.functional as F


def temperature(logits, t):
    return F.softmax(logits / t, dim=-1)


def rms(x):
    return torch.sqrt(torch.mean(x))


def top(scores, k):
    return torch.topk(scores, k)


def gate(x, w):
    return F.silu(x) * 2.0
"""


def test_look_alikes_get_no_finding(engine):
    result = engine.migrate("m.py", LOOK_ALIKES.encode())
    assert [f for f in result.findings if f.code.startswith("NPU3")] == []


def test_a_fused_component_is_not_reported_again(engine):
    source = """
        import math
        import torch

        def attend(q, k, v):
            scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
            probs = torch.softmax(scores, dim=-1)
            out = torch.matmul(probs, v)
            return out
    """
    found, result = residual(engine, source)
    assert found == []
    assert [(f.code, f.action) for f in result.findings] == [("NPU302", "rewritten")]


def test_only_selected_families_are_reported(engine):
    narrow = build_engine(load_table(), select=["NPU2"])
    result = narrow.migrate("m.py", textwrap.dedent(UNREAD["NPU341"]).encode())
    assert not [f for f in result.findings if f.code.startswith("NPU3")]
