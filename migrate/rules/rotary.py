"""NPU310/NPU311: rotary position embedding → ``torch_npu.npu_rotary_mul``.

Every expression ``x * cos + rotate(x) * sin`` whose rotation is proven (a helper of this module
such as ``rotate_half``/``rotate_every_two``, or the rotation written inline; see
``_rotary_patterns``) becomes a guarded call::

    npu_glue.rotary_mul(x, cos, sin, "half") if npu_glue.rotary_fits(x, cos, sin, "half") else <original>

The site is rewritten wherever it is (``apply_rotary_pos_emb`` bodies, partial-rotary ``cat``s,
float32 upcast variants), so the code around it (signature, ``unsqueeze``, casts) is untouched and
the kernel computes in the dtype the original computed in. ``fits`` checks at run time what cannot
be proven statically (4-D, one dtype, D even and < 896, a cos/sin shape the kernel takes).

Reported instead (NPU311): complex-number forms (``view_as_complex``/``view_as_real``), and sums
whose operands are not plain names (they would be evaluated twice by the guard).
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, Optional, Set

import libcst as cst
from libcst.helpers import get_full_name_for_node

from npu_migrate.migrate.context import HELPER
from npu_migrate.migrate.guarded import guarded_expression
from npu_migrate.migrate.rules._rotary_patterns import inline_rotation_mode, rope_terms, rotation_mode
from npu_migrate.migrate.rules.base import Rule
from npu_migrate.opmap import Fallback

FUSED, REPORTED = "NPU310", "NPU311"
TARGET = "torch_npu.npu_rotary_mul"
RECORDS = {"half": "pattern.rotary.half", "interleave": "pattern.rotary.interleave",
           "complex": "pattern.rotary.complex", "operands": "pattern.rotary.operands"}


class Rotary(Rule):
    code = FUSED
    codes = (FUSED, REPORTED)
    name = "rotary"
    summary = "rotary position embedding (half or interleaved rotation) → guarded torch_npu.npu_rotary_mul"
    summaries = {
        FUSED: summary,
        REPORTED: "rotary embedding that is not rewritten (complex-number form, or operands that are not plain names)",
    }
    triggers = (b"cat", b"stack", b"view_as_complex")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.rotations = self._module_rotations()  # helper name -> mode
        self._params: List[Set[str]] = []  # parameter names of the enclosing functions
        self._complex: List[Dict[str, cst.Call]] = []  # complex-number calls per enclosing function
        self._whole_values: Set[int] = set()  # expressions that are a whole assigned/returned value

    def _module_rotations(self) -> Dict[str, str]:
        """Module-level functions that compute a rotation, bound once and not also imported."""
        bound = Counter()
        functions = {}
        for statement in self.ctx.module.body:
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                bound[statement.name.value] += 1
                if isinstance(statement, cst.FunctionDef):
                    functions[statement.name.value] = statement
            elif isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    for target in getattr(small, "targets", ()):
                        name = get_full_name_for_node(target.target)
                        bound[name] += 1
        modes = {}
        for name, function in functions.items():
            if bound[name] == 1 and not self.ctx.names.is_imported(name):
                mode = rotation_mode(function, self.qualified_name)
                if mode is not None:
                    modes[name] = mode
        return modes

    # -- context --------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        params = node.params
        names = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
        names |= {p.name.value for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)}
        self._params.append(names)
        self._complex.append({})

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._params.pop()
        calls = self._complex.pop()
        if "torch.view_as_complex" in calls and "torch.view_as_real" in calls:
            self._report(calls["torch.view_as_complex"], "complex",
                         f"complex-number rotary embedding in {node.name.value}() (view_as_complex … view_as_real) "
                         "is not rewritten: npu_rotary_mul takes real cos/sin tables")

    def visit_Call(self, node: cst.Call) -> None:
        name = self.qualified_name(node.func)
        if self._complex and name in ("torch.view_as_complex", "torch.view_as_real"):
            self._complex[-1].setdefault(name, node)

    def visit_Assign(self, node: cst.Assign) -> None:
        self._whole_values.add(id(node.value))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._whole_values.add(id(node.value))

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None:
            self._whole_values.add(id(node.value))

    # -- sites ----------------------------------------------------------------------------------
    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if self.ctx.migrated(node):  # a site migrated before keeps its original code as the fallback
            return
        for x, cos, rotated, sin in rope_terms(node):
            mode = self._mode(rotated, x)
            if mode is not None:
                self._site(node, x, cos, sin, mode)
                return

    def _mode(self, rotated: cst.BaseExpression, x: cst.BaseExpression) -> Optional[str]:
        """How ``rotated`` rotates ``x``: a call of a rotation helper on ``x``, or inline code."""
        if isinstance(rotated, cst.Call) and isinstance(rotated.func, cst.Name):
            name = rotated.func.value
            shadowed = any(name in params for params in self._params)
            args = rotated.args
            if (name in self.rotations and not shadowed and len(args) == 1 and args[0].keyword is None
                    and not args[0].star and args[0].value.deep_equals(x)):
                return self.rotations[name]
        return inline_rotation_mode(rotated, x, self.qualified_name)

    def _site(self, node: cst.BinaryOperation, x, cos, sin, mode: str) -> None:
        operands = [get_full_name_for_node(n) if isinstance(n, (cst.Name, cst.Attribute)) else None for n in (x, cos, sin)]
        if None in operands:
            text = self.ctx.module.code_for_node(node).strip()
            self._report(node, "operands", f"rotary embedding `{text}` ({mode} rotation) is not rewritten: "
                                           "x, cos and sin must be plain names (the guard reads them twice)")
            return
        x_name, cos_name, sin_name = operands
        call = f'{x_name}, {cos_name}, {sin_name}, "{mode}"'
        edit = guarded_expression(node, f"{HELPER}.rotary_fits({call})", f"{HELPER}.rotary_mul({call})",
                                  parenthesize=id(node) not in self._whole_values)  # an IfExp binds looser than `+`
        self.rewrite(node, f"rotary embedding of {x_name} ({mode} rotation) → {TARGET}(rotary_mode='{mode}'), "
                           f"guarded by {HELPER}.rotary_fits", target=TARGET, api=RECORDS[mode], edits=[edit],
                     helpers=[HELPER])

    def _report(self, node: cst.CSTNode, kind: str, message: str) -> None:
        record = self.ctx.table.exact(RECORDS[kind])
        fallback = record.fallback if record is not None and record.fallback else Fallback("manual", message)
        self.report(node, message, fallback=fallback, api=RECORDS[kind], code=REPORTED)
