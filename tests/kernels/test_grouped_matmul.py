import pytest
import torch
import torch.nn as nn

from npu_migrate.kernels._checks import NpuOpError
from npu_migrate.kernels.grouped_matmul import npu_grouped_matmul
from tests.tolerances import DTYPES, assert_close

K, N = 16, 12


def experts(count, dtype, bias=True):
    torch.manual_seed(0)
    return [nn.Linear(K, N, bias=bias).to(dtype) for _ in range(count)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_list_of_groups_matches_linear_loop(dtype):
    layers = experts(3, dtype)
    xs = [torch.randn(m, K).to(dtype) for m in (2, 5, 1)]
    with torch.no_grad():
        out = npu_grouped_matmul(xs, [l.weight.t() for l in layers], bias=[l.bias for l in layers])
        assert isinstance(out, list) and len(out) == 3
        for y, x, layer in zip(out, xs, layers):
            assert_close(y, layer(x), "npu_grouped_matmul")


def test_linear_layout_weight_is_refused():
    layer = experts(1, torch.float32)[0]
    with pytest.raises(NpuOpError, match=r"\[K, N\].*\.t\(\)"):
        npu_grouped_matmul([torch.randn(3, K)], [layer.weight.detach()])  # [N, K], not transposed


def test_square_untransposed_weight_gives_wrong_numbers():
    w = torch.randn(K, K)
    x = torch.randn(4, K)
    assert not torch.allclose(npu_grouped_matmul([x], [w])[0], torch.nn.functional.linear(x, w), atol=1e-3)


@pytest.mark.parametrize("group_list, group_list_type", [([2, 5, 9], 0), ([2, 3, 4], 1)])
@pytest.mark.parametrize("split_item", [0, 2])
def test_split_m_by_group_list(group_list, group_list_type, split_item):
    layers = experts(3, torch.float32, bias=False)
    x = torch.randn(9, K)
    w = torch.stack([l.weight.detach().t() for l in layers])  # one [E, K, N] tensor
    out = npu_grouped_matmul([x], [w], group_list=torch.tensor(group_list), group_type=0,
                             group_list_type=group_list_type, split_item=split_item)
    with torch.no_grad():
        ref = [layers[0](x[:2]), layers[1](x[2:5]), layers[2](x[5:])]
    if split_item == 2:
        assert len(out) == 1 and out[0].shape == (9, N)
        torch.testing.assert_close(out[0], torch.cat(ref))
    else:
        assert [y.shape[0] for y in out] == [2, 3, 4]
        for y, r in zip(out, ref):
            torch.testing.assert_close(y, r)


def test_concatenated_output_of_separate_groups():
    xs, ws = [torch.randn(2, K), torch.randn(3, K)], [torch.randn(K, N), torch.randn(K, N)]
    out = npu_grouped_matmul(xs, ws, split_item=3)
    assert len(out) == 1
    torch.testing.assert_close(out[0], torch.cat([xs[0] @ ws[0], xs[1] @ ws[1]]))


@pytest.mark.parametrize("kwargs, message", [
    (dict(scale=[torch.ones(N)]), "not emulated"),
    (dict(antiquant_scale=[torch.ones(N)]), "not emulated"),
    (dict(group_type=2), "not emulated"),
    (dict(group_list=torch.tensor([1])), "group_type=0"),
    (dict(group_type=0, group_list=torch.tensor([5])), "covers 5 rows"),
    (dict(split_item=4), "split_item"),
])
def test_constraints(kwargs, message):
    with pytest.raises(NpuOpError, match=message):
        npu_grouped_matmul([torch.randn(3, K)], [torch.randn(K, N)], **kwargs)


def test_cumsum_group_list_must_not_decrease():
    with pytest.raises(NpuOpError, match="non-decreasing"):
        npu_grouped_matmul([torch.randn(3, K)], [torch.randn(2, K, N)], group_list=torch.tensor([3, 1]), group_type=0)


def test_dtype_errors_and_no_backward():
    with pytest.raises(NpuOpError, match="float64"):
        npu_grouped_matmul([torch.randn(3, K, dtype=torch.float64)], [torch.randn(K, N, dtype=torch.float64)])
    with pytest.raises(NpuOpError, match="share one dtype"):
        npu_grouped_matmul([torch.randn(3, K).half()], [torch.randn(K, N)])
    with pytest.raises(NpuOpError, match="no backward"):
        npu_grouped_matmul([torch.randn(3, K)], [torch.randn(K, N, requires_grad=True)])
