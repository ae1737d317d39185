"""The helper's per-site record: each guard counts, at its site, the calls that took the fused path
and, per fallback, the first precondition that failed; NPU_GLUE_SITES switches it (count, log, off);
no device->host sync and nothing recorded (nor a graph break) under torch.compile."""

import logging

import pytest
import torch

from tests.helpers.dispatch_counts import OpCounter
from tests.helpers.support import HELPERS

SITE = "models/m.py:12:NPU302"


@pytest.fixture
def fresh(glue, monkeypatch):
    glue.reset_site_counts()
    monkeypatch.setattr(glue, "SITES", "count")
    yield glue
    glue.reset_site_counts()


def test_a_guard_counts_fused_calls_and_the_first_failed_precondition(fresh):
    q = torch.randn(1, 2, 4, 8)
    assert fresh.can_fuse(q, q, q, site=SITE)
    assert not fresh.can_fuse(q, q, q.half(), site=SITE)
    assert not fresh.can_fuse(q, q, q, weights_requested=True, site=SITE)
    assert not fresh.can_fuse(q, q, q, when=False, site=SITE)
    counts = fresh.site_counts()[SITE]
    assert (counts["calls"], counts["fused"]) == (4, 1)
    assert counts["fallbacks"] == {
        "q, k, v dtypes float32, float32, float16": 1,
        "the attention probabilities are requested (output_attentions)": 1,
        "a condition of the site's own code does not hold (the `when` of its guard)": 1,
    }


def test_a_check_that_precedes_the_deciding_one_counts_only_its_fallbacks(fresh):
    """``is_glu`` guards a region whose fused branch calls ``swiglu_linear``, which decides: a call is
    counted once."""
    gate, up = torch.nn.Linear(8, 6), torch.nn.Linear(8, 6)
    x = torch.randn(3, 8)
    site = "m.py:3:NPU330"
    for act in (torch.nn.functional.silu, torch.tanh):
        if fresh.is_glu(act, site=site):
            fresh.swiglu_linear(act, gate, up, x, site=site)
    assert fresh.site_counts()[site] == {"calls": 2, "fused": 1,
                                         "fallbacks": {"the activation is neither SiLU nor GELU": 1}}


def test_value_conditions_name_the_one_that_failed_in_one_sync(fresh):
    q = torch.randn(1, 2, 4, 8)
    mask = torch.zeros(1, 1, 4, 4)
    mask[..., 1, 2] = -5.0  # not 0 or minus infinity
    mask[..., 0, :] = float("-inf")  # and a dead row
    with OpCounter([HELPERS]) as counter:
        assert not fresh.can_fuse(q, q, q, additive=mask, site=SITE)
    assert counter.counts["sync"] == 1
    assert fresh.site_counts()[SITE]["fallbacks"] == {
        "the additive mask holds values other than 0 and minus infinity": 1}


def test_recording_adds_no_device_op(fresh):
    q = torch.randn(1, 2, 4, 8)
    with OpCounter([HELPERS]) as with_site:
        fresh.rotary_fits(q, q[:1, :1], q[:1, :1], site=SITE)
    with OpCounter([HELPERS]) as without:
        fresh.rotary_fits(q, q[:1, :1], q[:1, :1])
    assert with_site.ops == without.ops


def test_log_mode_logs_each_sites_first_fallback_once(fresh, monkeypatch, caplog):
    monkeypatch.setattr(fresh, "SITES", "log")
    q = torch.randn(1, 2, 4, 8)
    with caplog.at_level(logging.WARNING, logger="npu_glue"):
        for _ in range(3):
            fresh.can_fuse(q, q, q.half(), site=SITE)
            fresh.can_fuse(q, q, q.half(), site="other.py:1:NPU302")
    lines = [r.getMessage() for r in caplog.records if r.name == "npu_glue"]
    assert lines == [f"npu_glue: {SITE}: the original code runs: q, k, v dtypes float32, float32, float16",
                     "npu_glue: other.py:1:NPU302: the original code runs: q, k, v dtypes float32, float32, float16"]


def test_off_records_nothing(fresh, monkeypatch):
    monkeypatch.setattr(fresh, "SITES", "off")
    q = torch.randn(1, 2, 4, 8)
    assert fresh.can_fuse(q, q, q, site=SITE) and not fresh.can_fuse(q, q, q.half(), site=SITE)
    assert fresh.site_counts() == {}


def test_the_switch_is_read_from_the_environment(monkeypatch):
    import importlib.util
    import sys

    from npu_migrate import kernels

    monkeypatch.setenv("NPU_GLUE_SITES", "LOG")
    with kernels.emulate():
        spec = importlib.util.spec_from_file_location("npu_glue_env", HELPERS / "npu_glue.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["npu_glue_env"] = module
        try:
            spec.loader.exec_module(module)
        finally:
            sys.modules.pop("npu_glue_env")
    assert module.SITES == "log"


@pytest.mark.slow
def test_under_torch_compile_guards_trace_without_a_graph_break_and_record_nothing(fresh):
    x, w = torch.randn(2, 3, 8), torch.ones(8)

    def norm(x, w):
        if fresh.rms_norm_fits(x, w, site=SITE):
            return fresh.rms_norm(x, w, 1e-6)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    torch._dynamo.reset()
    try:
        got = torch.compile(norm, fullgraph=True, backend="eager")(x, w)
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(got, norm(x, w))
    assert fresh.site_counts()[SITE] == {"calls": 1, "fused": 1, "fallbacks": {}}  # the eager call only


def test_rms_norm_modules_count_their_forwards_at_the_site_that_made_them(fresh, tmp_path):
    """``nn.RMSNorm`` constructions and subclasses, migrated to ``npu_glue.RMSNorm.at(site=...)`` and
    ``.base(site=...)``: each module counts at its own site; the state dict, results and pickling are
    those of torch's module."""
    built_at, subclassed_at = "m.py:4:NPU320", "m.py:9:NPU320"
    scaled = type("Scaled", (fresh.RMSNorm.base(site=subclassed_at),), {"__module__": __name__})
    globals()["Scaled"] = scaled  # picklable by reference, as a class of the user's module is
    plain = fresh.RMSNorm.at(site=built_at)(8, eps=1e-5)
    sub, other = scaled(8), scaled(8)
    x = torch.randn(3, 8)
    for module in (plain, sub, other):
        want = torch.nn.RMSNorm(8, eps=module.eps)
        want.load_state_dict(module.state_dict())
        torch.testing.assert_close(module(x), want(x))
        assert list(module.state_dict()) == ["weight"]
    plain(x.double())  # float64: the kernel does not take it
    counts = fresh.site_counts()
    assert counts[built_at]["calls"] == 2 and counts[built_at]["fused"] == 1
    assert list(counts[built_at]["fallbacks"]) and counts[subclassed_at] == {"calls": 2, "fused": 2, "fallbacks": {}}
    assert isinstance(sub, torch.nn.RMSNorm) and fresh.RMSNorm.base(site=subclassed_at) is scaled.__mro__[1]
    path = tmp_path / "m.pt"
    torch.save(torch.nn.Sequential(plain, sub), path)
    again = torch.load(path, weights_only=False)
    assert (again[0].site, again[1].site) == (built_at, subclassed_at)
    del globals()["Scaled"]
