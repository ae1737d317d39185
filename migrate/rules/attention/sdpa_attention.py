"""NPU301: ``F.scaled_dot_product_attention(...)`` → ``npu_glue.sdpa(...)``, which runs
``torch_npu.npu_fusion_attention`` when that is exact and the original SDPA otherwise.

## What it does
Rewrites every call of `torch.nn.functional.scaled_dot_product_attention`, under any import alias,
to `npu_glue.sdpa(...)` with the same arguments and its site (`site=`: the helper counts, per site,
the calls that ran the kernel and why the others fell back, which `migrate parity` reports).
`npu_glue` is the small helper module vendored beside the file (part of the diff). At run time
`npu_glue.sdpa` calls `torch_npu.npu_fusion_attention(q, k, v, q.shape[1], "BNSD", atten_mask=...,
scale=..., keep_prob=1 - dropout_p, sparse_mode=...)[0]` when that computes what SDPA computes, and
the original SDPA otherwise.

## Why
SDPA and the NPU kernel disagree on almost every default, and each difference silently changes
results if copied naively:

- mask polarity: an SDPA bool mask is True = attend, the NPU's True = masked out (the helper passes
  `~mask`, broadcast to `[B, 1 or N, Sq, Skv]`);
- `is_causal` in SDPA is aligned top-left (`ones(L, S).tril()`), which is `sparse_mode=2` with the
  compressed 2048×2048 `triu(ones, 1)` mask (built once per device by `npu_glue.causal_mask`), not
  `sparse_mode=3` (bottom-right); they differ when Sq ≠ Skv;
- the NPU `scale` defaults to 1.0, SDPA's to 1/sqrt(D): the scale is always passed;
- fully masked rows give 0 in SDPA: bool masks run with `inner_precise=2`, the kernel's invalid-row
  correction;
- a float (additive) mask converts only when every value is 0 or ≤ dtype min / 2 (HF's `finfo.min`
  masks, `-inf`) and no row is fully masked; any other bias runs the original SDPA;
- `enable_gqa=True` is the kernel's native GQA (head_num = Nq, a multiple of Nkv).

Rank, dtype (float64 has no kernel), head dim (≤ 768) and mask values are run-time properties, so
every site goes through the guard; the diff stays one name per call.

## Fix safety
Safe: the helper falls back to the original call whenever a precondition fails (4-D q/k/v of one
float16/bfloat16/float32 dtype, D ≤ 768, Dv ≤ D, Nq ≤ 256 and a multiple of Nkv, convertible mask,
not both a mask and `is_causal`, dropout_p < 1). Checked under the emulator against SDPA for causal
Sq ≠ Skv, GQA, bool and additive masks, float32 and bfloat16 (`tests/helpers/test_npu_glue.py`,
`tests/rules/test_attention_rules.py`); tolerances are in `opmap/attention.yaml`.

## Known problems
With `dropout_p > 0` the dropout pattern comes from the NPU's generator, so results match SDPA only
in distribution. A float mask costs one device synchronisation per call (the value check). An alias
imported only for SDPA (`from torch.nn.functional import scaled_dot_product_attention as sdpa`) is
left unused.
"""

from __future__ import annotations

import libcst as cst

from ...diagnostics import DiagnosticCode
from ...edits import ImportSpec, template
from ...view.emit import sited
from ..base import Rule

API = "torch.nn.functional.scaled_dot_product_attention"
TARGET = "torch_npu.npu_fusion_attention"


class SdpaAttention(Rule):
    declarations = (
        DiagnosticCode("NPU301", "sdpa-attention",
                       "F.scaled_dot_product_attention → torch_npu.npu_fusion_attention via the guarded npu_glue.sdpa",
                       rewrites=True, example="sdpa", doc=__doc__),
    )
    triggers = (b"scaled_dot_product_attention",)

    @classmethod
    def may_find(cls, words) -> bool:
        """The call's qualified name ends in its own name (an import, a star import, an attribute)."""
        return API.rsplit(".", 1)[1] in words.names

    def visit_Call(self, node: cst.Call) -> None:
        if self.qualified_name(node.func) != API or self.ctx.is_helper or self.ctx.migrated(node):
            return
        if any(a.keyword is not None and a.keyword.value == "site" for a in node.args):
            return
        holes = {f"a{i}": arg.value for i, arg in enumerate(node.args)}
        args = [f"{arg.star}{arg.keyword.value + '=' if arg.keyword else ''}{{a{i}}}" for i, arg in enumerate(node.args)]
        self.replace(
            node, template(sited(f"npu_glue.sdpa({', '.join(args)})"), **holes),
            f"scaled_dot_product_attention → {TARGET} via npu_glue.sdpa (checked at run time, else the original SDPA)",
            target=TARGET, api=API, imports=[ImportSpec("torch_npu")], helpers=["npu_glue"],
        )
