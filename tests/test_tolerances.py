"""The kernel tests' tolerances come from the op table: a kernel with a ``torch_npu.<op>`` record
gets the record's numbers, the kernels listed as having none are emulated kernels, and a name that
is neither is refused instead of falling back."""

import pytest
import torch

from npu_migrate.kernels.registry import load_all
from tests.tolerances import DTYPES, UNRECORDED, WITHOUT_A_RECORD, tolerance
from tests.snippets import builtin_table

RECORDED = sorted(r.api.removeprefix("torch_npu.") for r in builtin_table().records()
                  if r.api.startswith("torch_npu.") and r.tolerance)


@pytest.mark.parametrize("op", RECORDED)
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_kernel_with_a_record_gets_the_records_numbers(op, dtype):
    limits = builtin_table().exact(f"torch_npu.{op}").tolerance[str(dtype).removeprefix("torch.")]
    assert tolerance(op, dtype) == dict(rtol=limits.rtol, atol=limits.atol)


def test_the_kernels_without_a_record_are_emulated_kernels():
    assert RECORDED and WITHOUT_A_RECORD <= set(load_all())
    assert tolerance("npu_grouped_matmul", torch.bfloat16) == UNRECORDED[torch.bfloat16]


def test_a_name_that_is_neither_is_refused():
    with pytest.raises(AssertionError, match="no tolerance for torch_npu.npu_swigl"):
        tolerance("npu_swigl", torch.float32)
