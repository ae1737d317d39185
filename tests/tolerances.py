"""Tolerances in tests: the op table's (opmap/*.yaml, ``tolerance:`` per dtype, each with its reason).

``recorded(api, dtype)``: the tolerance of the record ``api``, which must have one (a migrated
component against its original: ``pattern.rotary.half``, ``torch_npu.npu_swiglu``, ...).

``tolerance(op, dtype)`` and ``assert_close(actual, expected, op)``: a kernel test's, that of the
kernel's ``torch_npu.<op>`` record; ``assert_close`` compares in float32 for the dtype of ``actual``
(or the one given). The kernels in ``WITHOUT_A_RECORD`` have no tolerance in the table yet; their
tests keep the bound they were written with (``UNRECORDED``) until the table carries theirs, which
then takes over. The attention and rotary patterns' records (``pattern.attention.*``,
``pattern.rotary.*``) bound eager code against the kernel, not the kernel against a float64
reference, and are not read for kernels. Any other name is refused, so a misspelt kernel never
falls back silently.
"""

import torch

from tests.snippets import builtin_table

DTYPES = [torch.float32, torch.float16, torch.bfloat16]

#: the kernels whose tests need a tolerance the op table lacks (no ``torch_npu.<op>`` record has one)
WITHOUT_A_RECORD = frozenset({
    "npu_fusion_attention", "npu_prompt_flash_attention", "npu_incre_flash_attention",
    "npu_fused_infer_attention_score", "npu_rotary_mul", "npu_apply_rotary_pos_emb",
    "npu_layer_norm_eval", "npu_add_layer_norm", "npu_gelu", "npu_fast_gelu", "npu_grouped_matmul",
    "npu_moe_finalize_routing", "npu_scaled_masked_softmax",
})

#: their bound: the emulated kernels compute in float32 and round once, while the references (like
#: the code they replace) may round intermediate values to the input dtype, so the two may differ by
#: a few ulp
UNRECORDED = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),    # same math, only the summation order differs
    torch.float16: dict(atol=2e-3, rtol=2e-3),    # a couple of fp16 ulp (2^-10 ~ 1e-3) from intermediate rounding
    torch.bfloat16: dict(atol=2e-2, rtol=2e-2),   # a couple of bf16 ulp (2^-7 ~ 8e-3) from intermediate rounding
}


def recorded(api: str, dtype: torch.dtype) -> dict:
    """``torch.testing.assert_close`` keywords: the op table's tolerance of ``api`` in ``dtype``."""
    record = builtin_table().get(api)
    limits = record.tolerance.get(str(dtype).removeprefix("torch.")) if record is not None else None
    assert limits is not None, f"the op table has no tolerance for {api} in {dtype}"
    return dict(rtol=limits.rtol, atol=limits.atol)


def tolerance(op: str, dtype: torch.dtype) -> dict:
    """``torch.testing.assert_close`` keywords for the kernel ``torch_npu.<op>`` in ``dtype``."""
    record = builtin_table().exact(f"torch_npu.{op}")
    limits = record.tolerance.get(str(dtype).removeprefix("torch.")) if record is not None else None
    if limits is None:
        assert op in WITHOUT_A_RECORD, f"the op table has no tolerance for torch_npu.{op} in {dtype}"
        return dict(UNRECORDED[dtype])
    return dict(rtol=limits.rtol, atol=limits.atol)


def assert_close(actual: torch.Tensor, expected: torch.Tensor, op: str, dtype=None) -> None:
    dtype = dtype or actual.dtype
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    torch.testing.assert_close(actual.float(), expected.float(), **tolerance(op, dtype))
