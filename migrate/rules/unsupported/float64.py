"""NPU101: float64 (``torch.float64``, ``torch.double``, ``DoubleTensor``, ``.double()``) is reported:
NPUs have no float64 kernels, and switching to float32 changes results, so no silent rewrite.

Names inside a comparison (``x.dtype == torch.float64``) only test a dtype and are not reported.
"""

from typing import Set

import libcst as cst

from ...diagnostics import DiagnosticCode
from .._members import MemberRule
from .._table import TableNameRule


class Float64(TableNameRule, MemberRule):
    declarations = (DiagnosticCode("NPU101", "float64", "float64 has no NPU kernels (use float32)", example="float64"),)
    triggers = (b"float64", b"double", b"Double")
    member = "double"

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._compared: Set[int] = set()

    def visit_Comparison(self, node: cst.Comparison) -> None:
        for operand in (node.left, *(c.comparator for c in node.comparisons)):
            elements = operand.elements if isinstance(operand, (cst.Tuple, cst.List, cst.Set)) else ()
            self._compared.update(id(n) for n in (operand, *(e.value for e in elements)))

    def on_record(self, node, qualified, record, api) -> None:
        if id(node) not in self._compared:
            super().on_record(node, qualified, record, api)

    def visit_Call(self, node: cst.Call) -> None:
        record = self.ctx.table.get("Tensor.double")
        if record is not None and not node.args and self.called_member(node) is not None:
            self.report_record(node, record, record.api, f".double(): {record.summary}")
