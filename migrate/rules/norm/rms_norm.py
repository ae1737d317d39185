"""NPU320/NPU321: RMSNorm → ``torch_npu.npu_rms_norm`` / ``npu_gemma_rms_norm`` (guarded; the matcher
is ``norm._match``), or reported with a plan. Each code's page is its part below.

# NPU320
## What it does
Finds RMSNorm by what it computes, in the function's dataflow view (locals followed across
statements, helper methods such as Meta's `self._norm(x.float())` inlined): `x * rsqrt(mean(x²,
dim=-1, keepdim=True) + eps)` times an optional weight, in the usual spellings (`pow(2)`, `x * x`,
`square`, `** 2`; `mean(..., dim=-1)` or numpy's `axis=-1`; `torch.rsqrt(v + eps)`, `(v +
eps).rsqrt()`, `pow(-0.5)`, `** -0.5`, `1 / sqrt(...)`, `x / sqrt(...)`), computed on `x` or on `x`
cast to float32 and cast back to x's dtype (`.to(input_dtype)`, `.type_as(x)`) or to the weight's,
before or after the weight, including T5's `x * rsqrt(mean(x.to(float32)²) + eps)` followed by `if
self.weight.dtype in [torch.float16, torch.bfloat16]: x = x.to(self.weight.dtype)`, Gemma's `(1 +
weight)` (on `npu_rms_norm` with `1.0 + weight.float()` as its weight, or on `npu_gemma_rms_norm`
where the result is promoted from x's and the weight's dtypes), litgpt's `(1 + w) if
self.add_unit_offset else w`, and a reduction dim the code keeps in an attribute (litgpt's
`self.dim`, checked at run time: `self.dim in (-1, x.dim() - 1)`).

- A norm a function returns gets a guarded fast path in front of the statements that compute it; the
  original statements stay as the fallback.
- A norm inside a larger function: its statements become a guarded region (`if <guard>: normed =
  <fused> else: <the original statements>`, def-use checked), or the expression a guarded
  conditional expression. Where the whole norm cannot be written (a gated norm whose input name was
  rebound), the norm inside it is fused and the rest stays.
- `F.rms_norm` / `torch.rms_norm` calls (also on `x.float()` cast back, as in torchtune) become a
  guarded conditional expression.
- `torch.nn.RMSNorm(...)` constructions and classes derived from `torch.nn.RMSNorm` use
  `npu_glue.RMSNorm` instead (`npu_glue.RMSNorm.at(site="path:line:NPU320")(...)` to construct,
  `npu_glue.RMSNorm.base(site=...)` as a base class): a subclass with the same parameters and state
  dict whose forward runs the kernel where it computes what `F.rms_norm` does, else the original
  forward, and counts each forward at its site for `migrate parity`'s per-site record.

The guards live in the vendored helper `npu_glue.py`.

## Why
On an Ascend NPU the hand-written form runs as five or six separate kernels; `npu_rms_norm` is one
fused kernel (and differentiable). `F.rms_norm` and `nn.RMSNorm` also run unfused (their aten
decomposition: pow, mean, add, rsqrt, mul). `npu_rms_norm` takes a float32 weight with
float16/bfloat16 activations (its mixed precision, the dtypes autocast training produces), so the
rewrite fuses there too and casts the kernel's result to the dtype the original returns.

## Fix safety
The fast path runs only when the kernel computes what the original does: the weight covers exactly
the normalised dims and has x's dtype, or is float32 with float16/bfloat16 x; x is a float tensor of
2–8 dims. Both compute in float32. The result gets the dtype the original returns, read off the
code: x's when the code casts back to x's (`.type_as(x)`, litgpt, Gemma, `F.rms_norm`), the
promotion of x's and the weight's when it multiplies by the weight last (Llama: float32 for bfloat16
x and a float32 weight). Where that dtype depends on a branch (T5's half-precision cast) only equal
dtypes are fused: under that guard T5's branch runs for half x and is skipped only for float32 x,
whose normalised value is float32 already. Code that rounds the normalised value to x's dtype before
multiplying by the weight (Llama) rounds twice where the kernel rounds once: expect ~1 ulp
differences in bfloat16/float16 (tolerances in `opmap/norm.yaml`). Gemma's `1 + weight` runs
`npu_rms_norm` with `1.0 + weight.float()` as its weight (float32, as the original computes the
factor), which has a backward on an NPU; `npu_gemma_rms_norm` has none, so it is used only for a
result promoted from x's and the weight's dtypes, and its fast path also requires that no gradient
is needed. `F.rms_norm(eps=None)` becomes `npu_glue.FLOAT32_EPS`: torch 2.13 documents
`torch.finfo(x.dtype).eps`, but computes float16/bfloat16 in float32 and takes float32's epsilon
(its decomposition and kernels), which the rewrite matches (tested against `F.rms_norm`).

## Known problems
Norms over other dims, mean-subtracting (LayerNorm-style) forms, norms multiplied by more than one
factor, norms without eps, float32 results that are never cast back and branches other than T5's are
reported as NPU321. `isinstance(m, torch.nn.RMSNorm)` and other references to the class stay
(`npu_glue.RMSNorm` is a subclass, so they still hold).

# NPU321
## What it does
Reports every inverse RMS, `rsqrt(mean(x²) + eps)` or `sqrt(...)` in any of the spellings NPU320
knows, that no fused rewrite covers, saying why: the mean runs over other dims or without `keepdim`,
the mean is subtracted first (LayerNorm-style), the norm is multiplied by something other than one
weight, no eps is added inside the root, a float32 result is never cast back (the kernel returns x's
dtype) or is cast to another tensor's dtype, the body has branches (other than T5's `if weight.dtype
in [float16, bfloat16]: x = x.to(weight.dtype)`, which NPU320 fuses), or an operand (`F.rms_norm` on
an expression, a rebound input) cannot be read where the guard would run.

## Why
DESIGN decision 5: a fused rewrite must preserve semantics for every input or guard itself; what
cannot be proven is left alone and reported with a plan. Decision 8: no silent site.

## Fix safety
Nothing is changed. The plan: keep the original (it runs on the NPU unfused), or restate the code as
a plain RMSNorm over the last dim (bind operands to names first) and let NPU320 fuse it (`migrate
ops show norm.rms_norm`: the plan's text, in `opmap/norm.yaml`).

## Known problems
A function that merely uses the same arithmetic for something else (not a norm) is reported too;
ignore it with `--ignore NPU321`.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Set, Tuple

import libcst as cst

from ...context import HELPER
from ...diagnostics import DiagnosticCode
from ...edits import SITE, template
from ...view.emit import Written, emit, operand_text, sited
from ...refusal import Refusal, unavailable
from ...view.values import number
from ...view.regions import interior
from ._match import GENERIC, Norm, has_eps, is_core, match
from .._table import TORCH_NPU
from ..base import Rule
from ....opmap import plan
from ...view.ops import Op

FUSED, REPORT = "NPU320", "NPU321"
TARGET = "torch_npu.npu_rms_norm"
MODULE = "torch.nn.RMSNorm"


def names_norm(names: Set[str], may_denote: Callable[[List[str]], Set[str]]) -> bool:
    """The vocabulary of the cheap test: a mean and a root (``"0.5"`` stands for a 0.5 literal), or
    rms_norm, each also by a local name that ``may_denote`` it."""
    means = {"mean"} | may_denote(["torch.mean"])
    roots = {"rsqrt", "sqrt", "0.5"} | may_denote(["torch.rsqrt", "torch.sqrt"])
    norms = {"rms_norm"} | may_denote(["torch.nn.functional.rms_norm", "torch.rms_norm"])
    return bool(names & means and names & roots or names & norms)


NOTE = "npu-migrate NPU320: fused RMSNorm where npu_glue proves it exact, else the original"
PLAN = plan("norm.rms_norm")


class RmsNorm(Rule):
    declarations = (
        DiagnosticCode(FUSED, "rms-norm",
                       "RMSNorm (hand-written, F.rms_norm, nn.RMSNorm) → torch_npu.npu_rms_norm (guarded; original "
                       "kept as fallback)", rewrites=True, example="rms_norm_llama", doc=__doc__),
        DiagnosticCode(REPORT, "rms-norm-unfused",
                       "RMSNorm-like code that the fused kernels do not reproduce (reported, not rewritten)",
                       example="rms_norm_reported", doc=__doc__),
    )
    triggers = (b"sqrt", b"-0.5", b"rms_norm", b"RMSNorm")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._by_name: Optional[Dict[str, List[cst.FunctionDef]]] = None
        self._mentions: Dict[int, bool] = {}
        self._regions: list = []  # statement ranges of the regions emitted in this file
        self._halves: Optional[set] = None

    # -- the functions of the module ------------------------------------------------------------
    def visit_Module(self, node: cst.Module) -> None:
        if self.ctx.is_helper:
            return
        functions = [f for f in self._functions() if self._may_hold(f)]
        found = {id(f): self._analyse(f) for f in functions}
        # helpers read through by a norm (migrated before or now) are not norms of their own
        consumed = {id(helper) for norms, _, _ in found.values() for norm in norms for helper in self._inlined(norm)}
        for func in functions:
            if id(func) not in consumed and not self._calls_npu(func):
                norms, cores, mismatches = found[id(func)]
                fresh = lambda value: not self.ctx.migrated(value.node)  # noqa: E731
                self._act(func, [n for n in norms if fresh(n.out)], [c for c in cores if fresh(c)], mismatches)

    def _act(self, func: cst.FunctionDef, norms: List[Norm], cores: List, mismatches: List) -> None:
        """Fuse the norms, outermost first (an inner one where an outer one cannot be written), and
        report every inverse RMS that no fused norm covers."""
        covered, failed = set(), {}
        for norm in norms:
            if id(norm.out) in covered:
                continue
            why = self._fuse(norm, func)
            if why is None:
                covered |= {id(v) for v in interior(norm.out, [norm.x])}
            else:
                failed.setdefault(id(norm.core), (norm, why))
        for core in cores:
            if id(core) in covered:
                continue
            if id(core) in failed:
                norm, why = failed[id(core)]
                kind = "Gemma RMSNorm" if norm.gemma else "RMSNorm"
                self.report(norm.out.node, f"{kind} in {func.name.value}() not fused: {why}", fallback=PLAN, code=REPORT)
            else:
                reason = self._reason(core, mismatches)
                if reason is None and not has_eps(core):
                    continue  # a root mean square that normalises nothing (an energy, a metric)
                self.report(core.node, f"RMSNorm-like code not fused: {reason or GENERIC}", fallback=PLAN, code=REPORT)

    def _functions(self) -> List[cst.FunctionDef]:
        if self._by_name is None:
            self._by_name = {}
            for node in self.ctx.tree.of_type(self.ctx.module, cst.FunctionDef):
                self._by_name.setdefault(node.name.value, []).append(node)
        return [f for funcs in self._by_name.values() for f in funcs]

    @classmethod
    def may_find(cls, words) -> bool:
        """``_may_hold`` for some function (with the functions it calls), or an nn.RMSNorm."""
        if MODULE.rsplit(".", 1)[1] in words.names:
            return True
        reached = (words.reach(f) for f in words.functions)
        return any(names_norm(r.names | ({"0.5"} if r.half else set()), words.may_denote) for r in reached)

    def _may_hold(self, func: cst.FunctionDef) -> bool:
        """Cheap and necessary for a match: the function and the functions of this module it may call
        (the view inlines them) name a mean and a root (or hold the 0.5 of ``** -0.5``), or name
        rms_norm; import aliases too."""
        found = self._mentions.get(id(func))
        if found is None:
            if self._halves is None:  # the functions holding a 0.5 literal, found in one walk of the module
                parents = self.ctx.tree.parents()
                self._halves = set()
                for node in self.ctx.tree.of_type(self.ctx.module, cst.Float):
                    if float(node.evaluated_value) == 0.5:
                        while node is not None:
                            self._halves.add(id(node))
                            node = parents.get(id(node))
            names, seen, stack = set(), set(), [func]
            while stack:
                current = stack.pop()
                if id(current) not in seen:
                    seen.add(id(current))
                    own = self.ctx.tree.names(current)
                    names |= own | ({"0.5"} if id(current) in self._halves else set())
                    stack.extend(f for name in own for f in self._by_name.get(name, ()))
            found = self._mentions[id(func)] = names_norm(names, self.ctx.names.may_denote)
        return found

    def _analyse(self, func: cst.FunctionDef) -> Tuple[List[Norm], List, List]:
        """(the norms the function computes, largest first; its inverse RMS values and rms_norm
        calls; (value, reason) for the values around one that do not match)."""
        view = self.ctx.view(func)
        norms, cores, mismatches = [], [], []
        for value in {id(v): v for v in view.values.values()}.values():
            if not view.home(value):
                continue
            if is_core(value) or value.op == Op.RMS_NORM:
                cores.append(value)
            norm = match(value)
            if isinstance(norm, Refusal):
                mismatches.append((value, norm.reason))
            elif norm is not None:
                norms.append(norm)
        norms.sort(key=lambda n: -len(interior(n.out, [n.x])))
        return norms, cores, mismatches

    @staticmethod
    def _reason(core, mismatches) -> Optional[str]:
        """The reason of the largest computation around ``core`` that failed to match, if any."""
        best, size = None, 0
        for root, reason in mismatches:
            values = interior(root, [])
            if any(v is core for v in values) and len(values) > size:
                best, size = reason, len(values)
        return best

    @staticmethod
    def _inlined(norm: Norm) -> List[cst.FunctionDef]:
        """Helpers of the module whose code the norm was read through (``self._norm``)."""
        home = norm.out.view
        return [v.view.func for v in interior(norm.out, [norm.x]) if v.view is not None and v.view is not home]

    def _calls_npu(self, func: cst.FunctionDef) -> bool:
        """Code that calls the NPU kernels itself (migrated by hand)."""
        return any(isinstance(n, cst.Call) and (self.qualified_name(n.func) or "").startswith("torch_npu.")
                   for n in self.ctx.tree.subtree(func))

    # -- the rewrite ----------------------------------------------------------------------------
    def _fuse(self, norm: Norm, func: cst.FunctionDef) -> Optional[Refusal]:
        """Emit the rewrite of one norm; None when done, else why not."""
        view = self.ctx.view(func)
        functional = norm.core.op == Op.RMS_NORM
        returned = not functional and view.result() is norm.out and self._returns_directly(func, norm)
        operands = [v for v in (norm.x, norm.weight, norm.eps, norm.dim, norm.shape) if v is not None]
        kind = "Gemma RMSNorm" if norm.gemma else "RMSNorm"
        op = "npu_gemma_rms_norm" if norm.gemma else "npu_rms_norm"
        if functional:
            api = self.qualified_name(norm.core.node.func) if isinstance(norm.core.node, cst.Call) else None
            message = f"{api} → torch_npu.{op} (guarded)"
        elif returned:
            api, message = None, f"{kind} {func.name.value}() → torch_npu.{op} (guarded fast path; original kept)"
        else:
            api, message = None, f"{kind} in {func.name.value}() → torch_npu.{op} (guarded)"
        return emit(self, view, norm.out, operands, lambda piece: self._write(norm, piece, message), note=NOTE,
                    target=f"torch_npu.{op}", api=api, imports=[TORCH_NPU], helpers=[HELPER], fast_path=returned,
                    anchor=func if returned else None, taken=self._regions)

    @staticmethod
    def _returns_directly(func: cst.FunctionDef, norm: Norm) -> bool:
        body = func.body.body if isinstance(func.body, cst.IndentedBlock) else ()
        last = body[-1] if body else None
        return isinstance(last, cst.SimpleStatementLine) and any(
            isinstance(s, cst.Return) and s.value is norm.out.node for s in last.body)

    def _write(self, norm: Norm, piece, message: str):
        """The norm written with its operands where the guard runs, or why not."""
        texts = {}
        for name in ("x", "weight", "eps", "dim", "shape"):
            value = getattr(norm, name)
            if value is not None:
                texts[name] = operand_text(piece, value)
                if texts[name] is None:
                    return unavailable(f"the norm's {name} is not available as a plain name where the fused call "
                                       "would run")
        x, weight = texts["x"], texts.get("weight")
        eps = self._eps(norm, texts.get("eps"))
        shape = texts.get("shape")
        guards = []
        if norm.dim is not None:
            guards.append(f"{texts['dim']} in (-1, {x}.dim() - 1)")
        shape_kw = f", normalized_shape={shape}" if shape is not None else ""
        gamma = weight or f"{x}.new_ones({shape or f'{x}.shape[-1]'})"
        if norm.gemma and norm.dtype == "x":  # npu_rms_norm with 1 + w as the original computes it: a backward
            guard = f"{HELPER}.rms_norm_fits({x}, {weight}{shape_kw}, mixed_dtype=True)"
            fused = f"{HELPER}.rms_norm({x}, 1.0 + {weight}.float(), {eps}, dtype={x}.dtype)"
        elif norm.gemma and norm.dtype is None:
            guard = f"{HELPER}.rms_norm_fits({x}, {weight}{shape_kw})"
            fused = f"torch_npu.npu_rms_norm({x}, 1 + {weight}, epsilon={eps})[0]"
        elif norm.gemma:  # promoted from x's and the weight's dtypes: the inference-only kernel
            guard = f"{HELPER}.gemma_rms_norm_fits({x}, {weight})"
            fused = f"torch_npu.npu_gemma_rms_norm({x}, {weight}, epsilon={eps})[0]"
        elif norm.dtype is None or weight is None:  # equal dtypes only (or no weight: x's dtype)
            guard = f"{HELPER}.rms_norm_fits({x}{', ' + weight if weight else ''}{shape_kw})"
            fused = f"torch_npu.npu_rms_norm({x}, {gamma}, epsilon={eps})[0]"
        else:  # the kernel's mixed precision: the result cast to the original's dtype
            guard = f"{HELPER}.rms_norm_fits({x}, {weight}{shape_kw}, mixed_dtype=True)"
            dtype = f", dtype={x}.dtype" if norm.dtype == "x" else ""
            fused = f"{HELPER}.rms_norm({x}, {weight}, {eps}{dtype})"
        return Written(sited(guard, guards), fused, message)

    @staticmethod
    def _eps(norm: Norm, text: Optional[str]) -> str:
        """F.rms_norm's default eps is float32's for the dtypes the kernel takes; a variable eps may be None."""
        if norm.eps is None:
            return f"{HELPER}.FLOAT32_EPS"
        if norm.core.op == Op.RMS_NORM and number(norm.eps) is None:
            return f"{HELPER}.rms_norm_eps({text})"
        return text

    # -- torch.nn.RMSNorm -----------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        if not self.ctx.is_helper and self.qualified_name(node.func) == MODULE and not self.ctx.migrated(node):
            self._module(node.func, "nn.RMSNorm module", "at")

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        for base in node.bases:
            if not self.ctx.is_helper and base.keyword is None and self.qualified_name(base.value) == MODULE:
                self._module(base.value, f"nn.RMSNorm subclass {node.name.value}", "base")

    def _module(self, node: cst.CSTNode, what: str, how: str) -> None:
        """``torch.nn.RMSNorm`` → ``npu_glue.RMSNorm.at(site=...)`` (a construction) or
        ``npu_glue.RMSNorm.base(site=...)`` (a base class): the module counts its forwards at the site."""
        self.replace(node, template(f"{HELPER}.RMSNorm.{how}(site={SITE})"),
                     f"{what} → {HELPER}.RMSNorm (torch_npu.npu_rms_norm in its forward where it computes the same; "
                     "same state dict)", target=TARGET, api=MODULE, helpers=[HELPER])
