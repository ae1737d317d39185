import pytest
import math

import torch

from npu_migrate.migrate.parity.criteria import default_criteria
from npu_migrate.migrate.parity.metrics import compare, cosine_similarity


def test_identical_tensors_are_perfect():
    x = torch.randn(4, 8)
    m = compare(x, x.clone())
    assert m.cosine == pytest.approx(1.0, abs=1e-12) and m.max_abs_err == 0.0 and m.one_thousandth_ratio == 1.0
    assert default_criteria()["float32"].judge(m) is None


def test_cosine_is_normalised_by_max_abs_value():
    # huge values would overflow a naive dot product in float32; msprobe normalises first
    x = torch.tensor([1e30, 2e30, -3e30])
    assert math.isclose(cosine_similarity(x.double(), (2 * x).double()), 1.0)
    assert cosine_similarity(torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)) == 1.0


def test_relative_error_ratios():
    b = torch.ones(1000)
    n = b.clone()
    n[:10] = 1.002  # 1% of elements off by 2/1000
    m = compare(b, n)
    assert m.one_thousandth_ratio == 0.99 and m.five_thousandths_ratio == 1.0
    assert math.isclose(m.max_rel_err, 0.002, rel_tol=1e-3)


def test_nan_inf_mismatch_fails_but_matching_nan_passes():
    b = torch.tensor([1.0, float("nan"), 3.0, 4.0])
    assert compare(b, b.clone()).nan_inf_mismatch == 0
    n = torch.tensor([1.0, 2.0, float("inf"), 4.0])
    m = compare(b, n)
    assert m.nan_inf_mismatch == 2
    assert "NaN/Inf" in default_criteria()["float32"].judge(m)


def test_scalar_skips_cosine_and_shape_mismatch_is_a_problem():
    assert compare(torch.tensor(1.0), torch.tensor(1.5)).cosine is None
    assert "shape" in compare(torch.zeros(2, 3), torch.zeros(3, 2)).problem


def test_criteria_override_and_abs_or_ratio_rule():
    strict = default_criteria()["float32"]
    b = torch.linspace(1, 2, 100)
    m = compare(b, b * 1.01)  # 1% everywhere: cosine 1, but every element off by 1%
    assert strict.judge(m) is not None
    loose = strict.with_overrides({"max_abs_err": 0.05, "reason": "r"})
    assert loose.judge(m) is None


def test_rounding_noise_below_the_small_value_cutoff_is_not_judged_by_cosine():
    from npu_migrate.migrate.parity.criteria import default_criteria
    from npu_migrate.migrate.parity.metrics import compare

    fp32 = default_criteria()["float32"]
    torch.manual_seed(0)
    noise_a, noise_b = torch.randn(64) * 1e-13, torch.randn(64) * 1e-13  # unrelated noise: cosine ~0
    metrics = compare(noise_a, noise_b)
    assert metrics.cosine < 0.5 and fp32.judge(metrics) is None
    # the same unrelated pattern at a real magnitude is a failure
    assert "cosine" in fp32.judge(compare(noise_a * 1e12, noise_b * 1e12))
    # values below the cutoff whose error exceeds it (sign flipped) still fail
    assert "max abs err" in fp32.judge(compare(torch.full((8,), 9e-7), torch.full((8,), -9e-7)))
