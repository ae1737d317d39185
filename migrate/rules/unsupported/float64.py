"""NPU101: float64 is reported, never rewritten: NPUs have no float64 kernels.

## What it does
Reports every use of `torch.float64`, `torch.double`, `torch.DoubleTensor`,
`torch.cuda.DoubleTensor` and `.double()` calls. Names used only in a comparison (`x.dtype ==
torch.float64`) are not reported.

## Why
Ascend NPUs have no float64 kernels ("npu does not support float64"); `transfer_to_npu` maps
`DoubleTensor` to `FloatTensor` at run time. Switching to float32 changes results (about 7
significant digits instead of 16), so the tool reports instead of rewriting silently.

## Fix safety
Reported only (plan `composite`): use float32, or keep that computation on the CPU in float64 and
move the result to the NPU.

## Known problems
`dtype=float` and NumPy float64 arrays converted with `torch.from_numpy` also give float64 tensors
and are not detected. A user class with its own `double()` method is recognised only inside that
class (`self.double()`).
"""

from typing import Set

import libcst as cst

from ...diagnostics import DiagnosticCode
from .._members import MemberRule
from .._table import TableNameRule


class Float64(TableNameRule, MemberRule):
    declarations = (DiagnosticCode("NPU101", "float64", "float64 has no NPU kernels (use float32)", example="float64",
                                   doc=__doc__),)
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
