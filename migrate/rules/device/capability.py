"""NPU206: CUDA compute-capability queries become what is true on an NPU: no CUDA capability.

## What it does
Replaces CUDA compute-capability queries with their value on an NPU, "no CUDA capability":
`torch.cuda.get_device_capability(...)` → `(0, 0)`; `torch.cuda.get_device_properties(...).major` /
`.minor` (also `props.major` for `props = torch.cuda.get_device_properties(...)` in the same scope)
→ `0`; `torch.cuda.get_arch_list()` → `[]`; `torch.utils._triton.has_triton()` and
`torch._dynamo.utils.has_triton()` → `False`. A comparison of such a value, or of its `[0]`/`[1]`,
with literals, and a `not` of a flag, is folded to its result:
`torch.cuda.get_device_capability() >= (8, 0)` → `False`.

## Why
Renamed to `torch.npu.get_device_capability()` the query returns None on an NPU (unless
`TORCH_NPU_DEVICE_CAPABILITY` is set, "only for compatibility"), so `>= (8, 0)` raises TypeError —
at import time for a module-level flag — and `torch.npu.get_device_properties()` has no
`major`/`minor` (opmap/reference/torch_npu_facts.md §4.2). Code that checks a capability selects a
CUDA feature (bf16 tensor cores, flash kernels, Triton paths for sm80+); "below every CUDA
architecture" sends an NPU to the path a GPU without the feature takes, never into a CUDA-only one.
`has_triton()` asks for a CUDA (sm70+), XPU or Triton-CPU device: an NPU machine has none, and
`transfer_to_npu` patches it to return False (opmap/reference/torch_npu_facts.md §5); the code it
selects keeps its non-Triton path. A folded test whose branch raises (`if not has_triton(): raise
...`) is reported instead.

## Fix safety
Safe in the sense that matters: the migrated module imports and never enters a capability-gated CUDA
path. A check whose "old GPU" branch raises (`if capability() < (7, 0): raise ...`) is reported and
left for review instead, since refusing an NPU is not a decision for the tool. A check that chose
bfloat16 by capability now chooses the "old GPU" dtype: use `torch.npu.is_bf16_supported()` there
(the finding says so).

## Known problems
Only literal operands are folded; `cap >= min_cap` with a variable keeps the comparison, which then
compares `(0, 0)`. Properties objects passed between functions are not followed.
"""

from __future__ import annotations

import ast
import operator
from typing import Any, Dict, List, Optional, Tuple

import libcst as cst

from ...context import FileContext
from ...diagnostics import DiagnosticCode
from ...view.syntax import code
from .._table import TableNameRule, dotted

CAPABILITY = "torch.cuda.get_device_capability"
PROPERTIES = "torch.cuda.get_device_properties"
VALUES: Dict[str, Any] = {CAPABILITY: (0, 0), "torch.cuda.get_arch_list": [], "torch.utils._triton.has_triton": False,
                          "torch._dynamo.utils.has_triton": False}
FIELDS = ("major", "minor")  # properties fields that hold the capability

_COMPARE = {
    cst.LessThan: operator.lt, cst.LessThanEqual: operator.le, cst.GreaterThan: operator.gt,
    cst.GreaterThanEqual: operator.ge, cst.Equal: operator.eq, cst.NotEqual: operator.ne,
    cst.In: lambda a, b: a in b, cst.NotIn: lambda a, b: a not in b,
    cst.Is: operator.is_, cst.IsNot: operator.is_not,
}
_NO_VALUE = object()


def is_properties_field(ctx: FileContext, chain: cst.CSTNode) -> bool:
    """``chain`` is the ``torch.cuda.get_device_properties`` of ``<chain>(...).major`` (this rule
    replaces the whole expression, so the rename of the chain must not happen)."""
    parents = ctx.tree.parents()
    call = parents.get(id(chain))
    field = parents.get(id(call)) if isinstance(call, cst.Call) and call.func is chain else None
    return isinstance(field, cst.Attribute) and field.value is call and field.attr.value in FIELDS


def literal(node: cst.CSTNode) -> Any:
    """The Python value of a literal operand (numbers, strings, None, tuples/lists/sets of them)."""
    try:
        value = ast.literal_eval(code(node).strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _NO_VALUE
    return value if isinstance(value, (int, float, str, tuple, list, set, frozenset, type(None))) else _NO_VALUE


class Capability(TableNameRule):
    declarations = (
        DiagnosticCode("NPU206", "capability",
                       "CUDA capability query → none on an NPU ((0, 0), [], has_triton() False; literals folded)",
                       rewrites=True, example="capability", doc=__doc__),
    )
    triggers = (b"get_device_capability", b"get_arch_list", b"get_device_properties", b"has_triton")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._scopes: List[Dict[str, bool]] = [{}]  # per scope: names bound to get_device_properties(...)

    # -- scopes of names bound to device properties ----------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.append({})

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        holds = self._is_properties_call(node.value)
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self._scopes[-1][target.target.value] = holds

    def _is_properties_call(self, node: cst.CSTNode) -> bool:
        return isinstance(node, cst.Call) and dotted(node.func) is not None and self.qualified_name(node.func) == PROPERTIES

    # -- sites --------------------------------------------------------------------------------------
    def on_record(self, node, qualified, record, api) -> None:
        call = self.ctx.tree.parents().get(id(node))
        if qualified in VALUES and isinstance(call, cst.Call) and call.func is node:
            self._site(call, VALUES[qualified], qualified, record)
        else:
            self.report_record(node, record, qualified, f"{qualified} (not called here): {record.summary}; review the use")

    def visit_Attribute(self, node: cst.Attribute) -> None:
        super().visit_Attribute(node)
        if node.attr.value not in FIELDS:
            return
        receiver = node.value
        bound = isinstance(receiver, cst.Name) and self._scopes[-1].get(receiver.value, False)
        if bound or self._is_properties_call(receiver):
            record = self.ctx.table.get(CAPABILITY)
            if record is not None and record.code == self.code:
                self._site(node, 0, f"{PROPERTIES}(...).{node.attr.value}", record)

    def _site(self, node: cst.CSTNode, value: Any, api: str, record) -> None:
        why = record.summary
        target, value = self._fold(node, value)
        new = cst.parse_expression(repr(value))
        message = f"{code(target).strip()} → {code(new)}: {why}"
        if self._raises(target, value):
            self.report(target, f"{code(target).strip()} is {value!r} on an NPU ({why}) and the branch it selects "
                        f"raises: left for review", fallback=record.fallback, api=api)
            return
        self.replace(target, new, message, target=repr(value), api=api)

    def _raises(self, test: cst.CSTNode, value: Any) -> bool:
        """``test`` is an ``if`` test whose branch taken for ``value`` raises: the check refuses GPUs
        without the capability, and refusing an NPU as well is not what a migration should decide."""
        statement = self.ctx.tree.parents().get(id(test))
        if not isinstance(statement, cst.If) or statement.test is not test or not isinstance(value, bool):
            return False
        branch = statement.body if value else (statement.orelse.body if isinstance(statement.orelse, cst.Else) else None)
        statements = branch.body if branch is not None else ()
        return any(isinstance(s, cst.SimpleStatementLine) and any(isinstance(x, cst.Raise) for x in s.body)
                   for s in statements)

    def _fold(self, node: cst.CSTNode, value: Any) -> Tuple[cst.CSTNode, Any]:
        """The outermost expression around ``node`` whose value is known: ``node[i]`` with a literal
        index, then a comparison whose other operands are all literals."""
        parents = self.ctx.tree.parents()
        parent = parents.get(id(node))
        if isinstance(parent, cst.Subscript) and parent.value is node and isinstance(value, tuple):
            index = _index(parent)
            if index is not None and -len(value) <= index < len(value):
                node, value = parent, value[index]
                parent = parents.get(id(node))
        if isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not) and isinstance(value, bool):
            return parent, not value
        if isinstance(parent, cst.ComparisonTarget):
            parent = parents.get(id(parent))
        if isinstance(parent, cst.Comparison):
            folded = _compare(parent, node, value)
            if folded is not _NO_VALUE:
                return parent, folded
        return node, value


def _index(subscript: cst.Subscript) -> Optional[int]:
    if len(subscript.slice) != 1 or not isinstance(subscript.slice[0].slice, cst.Index):
        return None
    value = literal(subscript.slice[0].slice.value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _compare(comparison: cst.Comparison, known: cst.CSTNode, value: Any) -> Any:
    """The result of ``comparison`` when ``known`` (one operand) has ``value`` and every other operand
    is a literal; ``_NO_VALUE`` when it cannot be computed."""
    operands = [comparison.left, *(target.comparator for target in comparison.comparisons)]
    values = [value if operand is known else literal(operand) for operand in operands]
    if any(v is _NO_VALUE for v in values):
        return _NO_VALUE
    try:
        return all(_COMPARE[type(target.operator)](values[i], values[i + 1])
                   for i, target in enumerate(comparison.comparisons))
    except (TypeError, KeyError):
        return _NO_VALUE
