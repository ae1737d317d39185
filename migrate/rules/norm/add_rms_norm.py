"""NPU322: a residual add followed by an RMSNorm module → torch_npu.npu_add_rms_norm (guarded).

## What it does
Finds, in a method, the residual add that feeds an RMSNorm module of another class, as
transformers' decoder layers write it:

```python
hidden_states = residual + hidden_states
residual = hidden_states
hidden_states = self.post_attention_layernorm(hidden_states)
```

(also `residual = residual + hidden_states` followed by `hidden_states = self.norm(residual)`, and
without the alias line when the sum is not used again). `self.post_attention_layernorm` must be
set in the class's `__init__` to a class of the same module whose `forward(self, x)` returns an
RMSNorm of `x` as NPU320 reads it: `x * rsqrt(mean(x², -1) + eps) * self.<weight>` with `eps` an
attribute of the module or a constant (no Gemma `1 + weight`, no reduction dim known only at run
time). The three statements become a guarded region: `npu_glue.add_rms_norm(residual,
hidden_states, norm.weight, norm.eps)` returns both the normalised value and the sum; the original
statements are the fallback.

## Why
The sum and the norm are two passes over the hidden state (the add, then the norm's own kernel);
`npu_add_rms_norm` reads both inputs once and writes the normalised value and the sum together.

## Fix safety
The fast path runs only where the kernel computes what the original does, checked on every call by
`npu_glue.add_rms_norm_fits`: the module is exactly of the class that was read (a subclass may
override forward), has no hooks and no forward of its own on the instance (torch's global module
hooks included); both inputs are float tensors of the same shape (no broadcasting add), 1 to 8
dims; the weight covers the last dim and has the dtype of the sum (the promotion of the two
inputs, so an AMP residual stream in float32 plus a bfloat16 output fuses, in float32). The kernel
has no backward on a real NPU (torch_npu 2.14.0: no autograd node), so the fast path also requires
that no gradient is needed: in training the original statements run, and the norm module's own
forward is still fused by NPU320. The kernel normalises the unrounded float32 sum where the
original normalises the sum rounded to the inputs' dtype: expect ~1 ulp differences in
bfloat16/float16 (tolerances in `opmap/norm.yaml`); the returned sum is the original's exactly.

## Known problems
Only the statement form is read: a norm called inside a larger expression (Meta's
`h = x + attn(self.attention_norm(x))`, `h + ffn(self.ffn_norm(h))`), a norm class imported from
another module, and a norm whose weight or eps is not an attribute of the module keep the add as
written (the norm itself is still NPU320's). In training the kernel never runs (no backward).
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from ...context import HELPER
from ...diagnostics import DiagnosticCode
from ...view.emit import Written, place, sited
from ...view.ops import Op
from ...view.regions import Slice
from ...view.scope import _params, class_attributes, module_classes
from ...view.syntax import code
from ..base import Rule
from ._match import Norm, match
from .rms_norm import RmsNorm

TARGET = "torch_npu.npu_add_rms_norm"
NOTE = "npu-migrate NPU322: residual add + RMSNorm fused where npu_glue proves it exact, else the original"


class AddRmsNorm(Rule):
    declarations = (
        DiagnosticCode("NPU322", "add-rms-norm",
                       "residual add followed by an RMSNorm module → torch_npu.npu_add_rms_norm (guarded; "
                       "original kept as fallback)", rewrites=True, example="add_rms_norm", doc=__doc__),
    )
    triggers = RmsNorm.triggers  # the norm's class is in the same module

    @classmethod
    def may_find(cls, words) -> bool:
        """An add, and a norm class (``RmsNorm.may_find``)."""
        return "Add" in words.operators and RmsNorm.may_find(words)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._classes: Optional[dict] = None  # the module's classes bound once, read on the first site

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        parents = self.ctx.tree.parents()
        cls = parents.get(id(parents.get(id(node))))
        if self.ctx.is_helper or not isinstance(cls, cst.ClassDef):
            return
        for block in self.ctx.tree.of_type(node, cst.IndentedBlock):
            if _enclosing_definition(block, parents) is node:  # not the blocks of inner defs and classes
                for last in range(1, len(block.body)):
                    self._site(node, cls, block, last)

    def _site(self, func: cst.FunctionDef, cls: cst.ClassDef, block: cst.IndentedBlock, last: int) -> None:
        """``t = a + b; [r = t;] y = self.<norm>(t)`` ending at ``block.body[last]``."""
        normed, call = _assignment(block.body[last])
        if normed is None or not isinstance(call, cst.Call) or len(call.args) != 1 or call.args[0].keyword \
                or call.args[0].star or not isinstance(call.args[0].value, cst.Name) or self.ctx.migrated(call):
            return
        summed = call.args[0].value.value
        alias_name, alias = _assignment(block.body[last - 1])
        start = last - 2 if isinstance(alias, cst.Name) and alias.value == summed else last - 1
        if start < 0:
            return
        total, add = _assignment(block.body[start])
        if total != summed or not (isinstance(add, cst.BinaryOperation) and isinstance(add.operator, cst.Add)) \
                or not all(isinstance(side, cst.Name) for side in (add.left, add.right)):
            return
        norm = self._norm_module(cls, call.func)
        if norm is None:
            return
        kind, weight, eps = norm
        module = code(call.func)
        kept = alias_name if start == last - 2 else (summed if summed != normed else None)
        written = Written(sited(f"{HELPER}.add_rms_norm_fits({{a}}, {{b}}, {module}, {kind}, {module}.{weight})"),
                          f"{HELPER}.add_rms_norm({{a}}, {{b}}, {module}.{weight}, {eps})",
                          f"residual add + {kind} module → {TARGET} (guarded: inference; original kept)",
                          outputs=(normed, kept or ""), holes=(("a", add.left), ("b", add.right)))
        # refused: the norm module's own forward is fused (NPU320); the add stays as written
        place(self, func.body, Slice(None, block, start, last + 1, ()), written, note=NOTE, target=TARGET,
              helpers=[HELPER])

    def _norm_module(self, holder: cst.ClassDef, callee: cst.BaseExpression) -> Optional[tuple]:
        """(class name, weight attribute, eps source) when ``callee`` is ``self.<attr>`` set in
        ``__init__`` to ``C(...)``, C a class of this module whose forward returns an RMSNorm of its
        input that the kernel computes; else None."""
        if not (isinstance(callee, cst.Attribute) and isinstance(callee.value, cst.Name)
                and callee.value.value == "self"):
            return None
        made = class_attributes(holder).get(callee.attr.value)
        if not (isinstance(made, cst.Call) and isinstance(made.func, cst.Name)):
            return None
        if self._classes is None:
            self._classes = module_classes(self.ctx.module)
        cls = self._classes.get(made.func.value)
        forward = next((s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "forward"),
                       None) if cls is not None and isinstance(cls.body, cst.IndentedBlock) else None
        params = _params(forward) if forward is not None else []
        if len(params) != 2 or forward.params.star_arg not in (None, cst.MaybeSentinel.DEFAULT) \
                or forward.params.star_kwarg is not None or params[1].default is not None:
            return None
        norm = _norm_of(self.ctx.view(forward))
        if norm is None or norm.gemma or norm.dim is not None or norm.shape is not None \
                or norm.x.op != Op.PARAM or norm.x.name != params[1].name.value:
            return None
        weight, eps = _own_attribute(norm.weight), _own_attribute(norm.eps)
        if eps is None and norm.eps is not None and norm.eps.op == Op.CONST and norm.eps.node is not None:
            eps = code(norm.eps.node)
        elif eps is not None:
            eps = f"{code(callee)}.{eps}"
        if weight is None or eps is None:
            return None
        return made.func.value, weight, eps


def _norm_of(view) -> Optional[Norm]:
    """The RMSNorm the function returns, when all it returns is one."""
    result = view.result()
    norm = match(result) if result is not None else None
    return norm if isinstance(norm, Norm) and norm.out is result else None


def _own_attribute(value) -> Optional[str]:
    """``attr`` for ``self.attr`` read in the norm's forward."""
    if value is not None and value.op == Op.ATTR and value.input is not None and value.input.op == Op.PARAM \
            and value.input.name == "self":
        return value.name
    return None


def _assignment(stmt: cst.CSTNode) -> tuple:
    """(target name, value) of ``name = value`` on a line of its own, else (None, None)."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
        assign = stmt.body[0]
        if len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
            return assign.targets[0].target.value, assign.value
    return None, None


def _enclosing_definition(node: cst.CSTNode, parents) -> Optional[cst.CSTNode]:
    """The innermost def or class around ``node``."""
    node = parents.get(id(node))
    while node is not None and not isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        node = parents.get(id(node))
    return node
