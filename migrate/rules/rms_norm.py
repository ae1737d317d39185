"""NPU320/NPU321: hand-written RMSNorm → ``torch_npu.npu_rms_norm`` / ``npu_gemma_rms_norm``.

Recognised: a function (or method, with ``self._norm(...)``-style helper methods followed) whose
straight-line body returns ``x * rsqrt(mean(x², -1, keepdim=True) + eps)`` times an optional weight
(or Gemma's ``1 + weight``), spelled with ``pow(2)``/``x * x``/``square``/``** 2`` and
``rsqrt``/``pow(-0.5)``/``** -0.5``/``1 / sqrt``/``/ sqrt``, optionally computed on ``x`` cast to
float32 and cast back to x's dtype (or to the weight's) before or after the weight, including T5's
``if weight.dtype in [torch.float16, torch.bfloat16]: x = x.to(weight.dtype)`` (the matcher is in
``_rms_norm_patterns``). The function gets a guarded fast path at its top; the original body stays
as the fallback::

    if npu_glue.rms_norm_fits(x, self.weight):
        return torch_npu.npu_rms_norm(x, self.weight, epsilon=self.eps)[0]

Under the guard (weight dtype == x dtype, weight covers the last dim) both compute in float32 and
return x's dtype. ``F.rms_norm``/``torch.rms_norm`` calls become a guarded conditional expression.
A function that holds the inverse-RMS core but not in a form above is reported (NPU321) with why.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Set, Tuple, Union

import libcst as cst

from npu_migrate.migrate.context import HELPER
from npu_migrate.migrate.edits import code
from npu_migrate.migrate.guarded import guarded_expression, region
from npu_migrate.migrate.rules._dataflow import Expr, bind, docstring_count, pure_code, walk
from npu_migrate.migrate.rules._rms_norm_patterns import Mismatch, Norm, NormMatcher
from npu_migrate.migrate.rules._table import TORCH_NPU
from npu_migrate.migrate.rules.base import Rule
from npu_migrate.opmap import Fallback

REPORT = "NPU321"
RMS_NORM_CALLS = ("torch.nn.functional.rms_norm", "torch.rms_norm")
RMS_NORM_PARAMS = ("input", "normalized_shape", "weight", "eps")
PLAN = Fallback(
    "manual",
    "Keep the original code (it runs on the NPU, unfused), or restate it as x * rsqrt(mean(x**2, -1, "
    "keepdim=True) + eps) * weight on the last dim and call torch_npu.npu_rms_norm(x, weight, "
    "epsilon=eps)[0] with weight in x's dtype.",
)


class RmsNorm(Rule):
    code = "NPU320"
    codes = ("NPU320", REPORT)
    name = "rms-norm"
    summary = "hand-written RMSNorm and F.rms_norm → torch_npu.npu_rms_norm (guarded; original kept as fallback)"
    triggers = (b"sqrt", b"-0.5", b"rms_norm")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._methods: Dict[str, cst.FunctionDef] = {}  # methods of the class being matched
        self._handled: set = set()  # ids of functions already matched or consumed
        self._core_names: Optional[Tuple[Set[str], Set[str]]] = None  # (names of a mean, of a root)

    # -- functions and methods ------------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        methods = {s.name.value: s for s in node.body.body if isinstance(s, cst.FunctionDef)} \
            if isinstance(node.body, cst.IndentedBlock) else {}
        self._methods = methods
        candidate = self._may_hold_core(methods.values())
        outcomes = {name: self._match(func) if candidate else None for name, func in methods.items()}
        consumed = {id(methods[inlined]) for outcome in outcomes.values()
                    if outcome is not None and isinstance(outcome[0], Norm) for inlined in outcome[1]}
        for func in methods.values() if candidate else ():  # helpers of an already migrated norm stay as they are
            if self._migrated(func):
                consumed.update(id(methods[name]) for name in _self_calls(func) if name in methods)
        for name, func in methods.items():
            self._handled.add(id(func))
            if id(func) not in consumed:
                self._act(func, outcomes[name])
        self._methods = {}

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if id(node) not in self._handled:
            self._handled.add(id(node))
            if self._may_hold_core([node]):
                self._act(node, self._match(node))

    def _may_hold_core(self, funcs: Iterable[cst.FunctionDef]) -> bool:
        """Cheap and necessary for ``_match`` to find anything in these functions (a function and
        the methods it may inline): a mean and an inverse square root (an rsqrt or sqrt, or the 0.5
        of a ``-0.5`` power), named literally or through an import alias."""
        tree, names = self.ctx.tree, self.ctx.names
        if self._core_names is None:
            self._core_names = ({"mean"} | names.may_denote(["torch.mean"]),
                                {"rsqrt", "sqrt"} | names.may_denote(["torch.rsqrt", "torch.sqrt"]))
        mean, root = self._core_names
        found = set().union(*(tree.names(func) for func in funcs))
        return bool(found & mean) and (bool(found & root) or any(
            isinstance(n, cst.Float) and float(n.evaluated_value) == 0.5 for func in funcs for n in tree.subtree(func)))

    def _match(self, func: cst.FunctionDef) -> Union[None, Tuple[Norm, List[str]], Tuple[str, cst.CSTNode]]:
        """(Norm, methods it inlined), (reason, node) when the function holds the RMS core in a form
        the kernel does not reproduce, or None when it is not a norm (or already migrated)."""
        if self._migrated(func):
            return None
        matcher = NormMatcher(self.qualified_name, self.ctx.module, self._methods)
        result = matcher.returned(func)
        reason = "the norm is not straight-line code (branches, loops or side effects)"
        if result is not None:
            try:
                return matcher.norm(result, func), list(matcher.inlined)
            except Mismatch as exc:
                reason = exc.reason
        core = matcher.core(func)
        return (reason, core) if core is not None else None

    def _act(self, func: cst.FunctionDef, outcome) -> None:
        if outcome is None:
            return
        first, second = outcome
        if isinstance(first, str):
            self.report(second, f"RMSNorm-like code not fused: {first}", fallback=PLAN, code=REPORT)
        else:
            self._fast_path(func, first)

    # -- the rewrite --------------------------------------------------------------------------
    def _fast_path(self, func: cst.FunctionDef, norm: Norm) -> None:
        module = self.ctx.module
        x, eps = norm.x, pure_code(norm.eps, module)
        weight = pure_code(norm.weight, module) if norm.weight is not None else None
        if norm.gemma:
            op, guard = "npu_gemma_rms_norm", f"npu_glue.gemma_rms_norm_fits({x}, {weight})"
        else:
            op, guard = "npu_rms_norm", f"npu_glue.rms_norm_fits({x}{', ' + weight if weight else ''})"
        gamma = weight or f"{x}.new_ones({x}.shape[-1])"
        body = func.body
        edit = region(body, body, docstring_count(body.body), len(body.body), code(guard),
                      [code(f"return torch_npu.{op}({x}, {gamma}, epsilon={eps})[0]")], fallthrough=True,
                      at_entry=True)  # the matcher resolved x, the weight and eps to their values on entry
        kind = "Gemma RMSNorm" if norm.gemma else "RMSNorm"
        message = f"{kind} {func.name.value}() → torch_npu.{op} (guarded fast path; original kept)"
        if isinstance(edit, str):
            self.report(func, f"{kind} {func.name.value}() not fused: {edit}", fallback=PLAN, code=REPORT)
            return
        self.rewrite(func, message, target=f"torch_npu.{op}", edits=[edit], imports=[TORCH_NPU], helpers=[HELPER])

    # -- F.rms_norm ---------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        if id(node) in self._handled or self.ctx.migrated(node):  # a call migrated before is its guard's fallback
            return
        api, record = self.lookup(node.func)
        if api not in RMS_NORM_CALLS or record is None or record.code != self.code:
            return
        args = bind(node, RMS_NORM_PARAMS)
        module = self.ctx.module
        codes = {k: pure_code(Expr(v), module) for k, v in (args or {}).items()}
        if args is None or "input" not in args or "normalized_shape" not in args or None in codes.values():
            self.report(node, f"{api}: arguments are not plain names, so the guarded rewrite would evaluate "
                              "them twice", fallback=PLAN, api=api, code=REPORT)
            return
        x, shape = codes["input"], codes["normalized_shape"]
        weight = codes.get("weight")
        weight = None if weight == "None" else weight
        eps = codes.get("eps")
        # torch's default is the epsilon of the op math type: float32 for float16/bfloat16/float32
        eps = "npu_glue.FLOAT32_EPS" if eps in (None, "None") else eps
        gamma = weight or f"{x}.new_ones({shape})"
        edit = guarded_expression(
            node, f"npu_glue.rms_norm_fits({x}, {weight + ', ' if weight else ''}normalized_shape={shape})",
            f"torch_npu.npu_rms_norm({x}, {gamma}, epsilon={eps})[0]")
        self.rewrite(node, f"{api} → torch_npu.npu_rms_norm (guarded)", target="torch_npu.npu_rms_norm", api=api,
                     edits=[edit], imports=[TORCH_NPU], helpers=[HELPER])

    # -- already migrated ---------------------------------------------------------------------
    def _migrated(self, func: cst.FunctionDef) -> bool:
        """A fast path emitted before, or code that calls the NPU kernels itself."""
        return self.ctx.has_fast_path(func) or any((self.qualified_name(n.func) or "").startswith("torch_npu.") for n in _calls(func))


def _self_calls(func: cst.FunctionDef) -> List[str]:
    """Names of the methods ``func`` calls as ``self.name(...)``."""
    return [c.func.attr.value for c in _calls(func)
            if isinstance(c.func, cst.Attribute) and isinstance(c.func.value, cst.Name) and c.func.value.value == "self"]


def _calls(func: cst.FunctionDef):
    return [n for n in walk(func.body) if isinstance(n, cst.Call)]
