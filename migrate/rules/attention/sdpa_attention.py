"""NPU301: ``F.scaled_dot_product_attention(...)`` → ``npu_glue.sdpa(...)``, which runs
``torch_npu.npu_fusion_attention`` when that is exact and the original SDPA otherwise.

Every precondition of the fused kernel at an SDPA call is a run-time property (rank, dtype, head
dim, mask dtype and values, ``is_causal`` that is often an expression), so the call keeps its
arguments, gains its site (``site=``: the helper counts what ran there) and changes its function:
the helper (vendored, part of the diff) converts the mask polarity, the top-left causal alignment (sparse_mode 2), the scale default and the dropout
probability, and takes GQA natively.
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
                       rewrites=True, example="sdpa"),
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
