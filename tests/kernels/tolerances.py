"""Per-dtype tolerances for comparing an emulated kernel with a textbook / Hugging Face reference.

The kernels compute in float32 and round once; the references (like the HF code they replace)
often round intermediate values to the input dtype, so the two may differ by a few ulp.
"""

import torch

TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),    # same math, only the summation order differs
    torch.float16: dict(atol=2e-3, rtol=2e-3),    # a couple of fp16 ulp (2^-10 ~ 1e-3) from intermediate rounding
    torch.bfloat16: dict(atol=2e-2, rtol=2e-2),   # a couple of bf16 ulp (2^-7 ~ 8e-3) from intermediate rounding
}

DTYPES = list(TOL)


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype=None) -> None:
    dtype = dtype or actual.dtype
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    torch.testing.assert_close(actual.float(), expected.float(), **TOL[dtype])
