"""NPU310/NPU311: rotary position embedding → ``torch_npu.npu_rotary_mul`` (a guarded call of the
vendored helper; the matcher is ``rotary._match``), or reported with a plan. Each code's page is its
part below.

# NPU310
## What it does
Finds rotary position embedding by what it computes, in the function's dataflow view (locals
followed across statements, helpers of the same module or class inlined: `rotate_half` at module
level, nested, one-line, a method or a `@staticmethod`), and replaces it with a guarded call of the
fused kernel through the vendored helper `npu_glue.py`. Three computations are recognised:

- **per-channel tables**: `x * cos + rotate(x) * sin` (sum and products in any order), with
  `rotate(x)` either `cat((-x2, x1), -1)` of the two halves of the last dim (the `half` rotation:
  Hugging Face, NeoX, litgpt's inline `apply_rope`; halves by slices at `x.shape[-1] // 2` or
  `x.size(-1) // 2`, `chunk(2, -1)`, `split(D // 2, -1)`) or `stack((-x_odd, x_even),
  -1).flatten(-2)` (the `interleave` rotation: GPT-J, Cohere; pairs by `x[..., ::2]`/`x[..., 1::2]`,
  by `x.reshape(*x.shape[:-1], -1, 2)` and `unbind(-1)` or `[..., 0]`/`[..., 1]`, joined back by
  `flatten(-2)`, `reshape(*shape[:-2], -1)` or RoFormer's `reshape_as(x)`); the rotation with the
  other sign (NanoChat's `cat((x2, -x1), -1)`) passes `-sin`; `x.float() * cos + rotate(x).float() *
  sin` (ERNIE, GLM: a cast commutes with the rotation) runs the kernel on x cast once, the guard
  (`rotary_fits_cast`) reading only x's shape:

  ```python
  npu_glue.rotary_mul(x, cos, sin, "half") if npu_glue.rotary_fits(x, cos, sin, "half") else <original>
  ```

- **pair tables** (one cos and one sin per rotated pair, D/2 wide): torchtune's packed `[cos|sin]`
  cache and ChatGLM, `stack((x0*c - x1*s, x1*c + x0*s), -1)` over even/odd channels, and
  `cat((x1*c - x2*s, x2*c + x1*s), -1)` over the halves → `npu_glue.pair_rotary_mul(x, c, s, mode)`;
  DeepSeek's `cat((x0*c - x1*s, x1*c + x0*s), -1)` over even/odd channels (pairs rotated, written
  out as even then odd channels) → `split=True` (one copy puts the even channels before the odd
  ones, then the `half` kernel);
- **complex numbers**: `view_as_real(view_as_complex(pairs) * freqs_cis)` (Meta Llama,
  mistral-inference) → `npu_glue.complex_rotary_mul(x_complex, freqs_cis)`;
- **2x2 rotation-matrix tables** built in the function (Flux's layout, applied by columns, by `@`
  or by `einsum`): proven a rotation by their structure (equal diagonal, off-diagonals that negate
  each other), which the kernel computes exactly whatever the tables hold.

The rotation by -θ (`x * cos - rotate_half(x) * sin`, `(x1*c + x2*s, x2*c - x1*s)`) is the kernel
with `-sin`; a rotation helper that branches on a flag between the half and the interleaved rotation
(flash-attn's `rotate_half(x, interleaved)`) gets the mode the flag chooses at run time, `"interleave"
if interleaved else "half"`, in the guard and in the call. Halves split at `dim=x1.ndim - 1`, by
`view(B, nh, T, 2, hs // 2).unbind(-2)` with x's own sizes, or by einops `'(j d) -> j d'` are x's
halves.

For pair and complex tables the helper derives the per-channel tables the kernel takes
(`repeat_interleave(2, -1)` of cos/sin, or `cat((c, c), -1)` for halves) from the tables' current
values on every call (a copy of the tables, S x D, not of the activations): a table kept between
calls could be stale, since a cache buffer changes through `.data` or `load_state_dict` without a
new identity or version (see `docs/design.md`, "Derived state"). Leading dims the tables repeat over
merge into one (torchtune's tiled vision rotary, 5-D).

Only the rotary computation is replaced. When the rotation has statements of its own before the sum
(litgpt: `x1 = ...; x2 = ...; rotated = torch.cat((-x2, x1), -1)`), they move into the fallback
branch of a guarded region (the def-use check of `migrate.guarded` proves it sound; statements in
between that compute something else, such as litgpt's `cos.view(...)`, run before the guard), so the
fused path does not compute the rotation; if the rotation is read afterwards it stays where it is
and only the sum is guarded. Signatures, `unsqueeze`s, partial rotary (`cat([rope(q_rot), q_pass],
-1)`) and float32 upcasts around the site are untouched.

## Why
`npu_rotary_mul` is one differentiable kernel instead of slices, a negation, a concatenation, two
products and a sum per tensor, on every layer's q and k. It computes `x * r1 + rotate(x) * r2` with
the same two rotations (facts §2.4), so the mode is decided by the rotation the code performs, never
by a function's name. The complex product `(a + ib)(c + id)` is the interleaved rotation of the pair
`(a, b)` with `cos = c`, `sin = d`.

The kernel takes only some inputs, which the static code cannot prove; the `*_fits` guards check
them at run time and the original code runs when one fails:

- `x` is 4-D (pair and complex forms: 3-D or more, made 4-D); `cos`/`sin` of one shape, of x's float
  dtype (pair/complex forms: all cast to the dtype the original's products promote to) and device;
  complex tensors complex64;
- the head dim `D` is even and below 896;
- the cos/sin shape is one the kernel takes for x's layout: BNSD `11SD`, `B1SD`, `BNSD`; BSND
  `1S1D`, `BS1D`, `BSND`; SBND `S11D`, `SB1D`, `SBND`; in `interleave` mode only
  `11SD`/`1S1D`/`S11D` (per-batch `BS1D` tables are passed with batch and sequence merged into one
  sequence, which is exact);
- B and N below 1000 (`interleave`: B·N), B·N ≤ 1024 when cos/sin need gradients.

The tables' values are not checked: the kernel computes `x * r1 + rotate(x) * r2` for any values
(torch_npu's documentation states no range), so scaled tables (YaRN's `attention_scaling`, xPos)
fuse.

## Fix safety
Safe by construction: the fused branch runs only when its guard holds, and then computes the same
formula on the same operands; otherwise the original code runs unchanged. In float32 results agree
to the last bits; in float16/bfloat16 the kernel computes in float32 and rounds once where the
original rounds each product and the sum, so results differ by about one unit in the last place
(tolerances with reasons: `migrate ops show pattern.rotary.half`). The kernel is differentiable
(`npu_rotary_mul_backward`), so training code may use it; derived tables of cos/sin that need
gradients are made on every call so the gradient reaches them. `npu_apply_rotary_pos_emb` is not
used: it works in place and has no backward.

## Known problems
- Pair and complex tables are widened on every call, once per layer where several layers share one
  table (an S x D copy each).
- `x`, `cos` and `sin` must be plain names, attribute chains or cheap views of them (constant
  subscripts, `unsqueeze`, `view`, ...: the guard reads them twice); others are reported as NPU311.
- einops `rearrange(..., "... d two -> ... (d two)")` rotations are not recognised.

# NPU311
## What it does
Reports rotary position embedding code that NPU310 does not rewrite, each with a plan:

- a recognised rotary embedding whose `x`, `cos` or `sin` is an expression that is not a cheap view
  (`cos[position_ids].unsqueeze(1)` gathers, `q.float()` copies), or whose guarded region would not
  be sound (`migrate.guarded`'s def-use check);
- a complex product with a view of x as complex numbers that is not exactly
  `view_as_real(view_as_complex(x) * freqs_cis)` (a further factor, for instance);
- `x * cos + f(x) * sin` where `f` is a function imported from another module whose name says it
  rotates (`from .utils import rotate_half`, flash-attn's `rotate_half`; named as the file imports
  it: the rule reads one file at a time), or defined in the file but not read by the view (the
  report says why: a keyword it does not take, a body over 30 statements, ...);
- `x * cos + r * sin` where `r` concatenates or stacks a negated piece of x that is not proven to be
  its half or interleaved rotation; the report names the step that failed (the split point, the
  dim, the pieces);
- 2x2 tables not proven to be rotation matrices (passed in, or with entries that do not match).

## Why
The guarded rewrite of NPU310 evaluates `x`, `cos` and `sin` twice (in the guard and in the call);
an expression would repeat its work or its side effects. A complex product with more factors is not
a rotation the kernel computes. The mode of an imported rotation cannot be read, and a wrong guess
would scramble every head.

## Fix safety
No fix: the code is left as it is and still runs on the NPU (the slices, concatenation and complex
ops have NPU kernels), only unfused.

## Known problems
An imported function is taken for a rotation by its name (it contains "rot"); an imported rotation
with another name is not reported.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Set, Tuple

import libcst as cst

from ...context import HELPER
from ...diagnostics import DiagnosticCode
from ...edits import ImportSpec
from ...view.emit import Written, emit, operand_text, sited
from ...refusal import unavailable
from ...view.regions import statement_of
from ._match import may_rotate, ropes
from ._rope import COMPLEX, FULL, Rope
from ._unread import Unread, unmatched, why_not_rotation_matrix, why_unproven
from ...view.syntax import code
from ..base import Rule
from ....opmap import Fallback
from ...view.ops import Op

FUSED, REPORTED = "NPU310", "NPU311"
TARGET = "torch_npu.npu_rotary_mul"
RECORDS = {kind: f"pattern.rotary.{kind}" for kind in (
    "half", "interleave", "pairs", "complex", "switched",  # fused
    "operands", "helper", "local", "rotation", "matrix")}  # reported
NOTE = "npu-migrate NPU310: fused rotary embedding where npu_glue proves it exact, else the original"
ROTARY_NAMES = ("cat", "concat", "concatenate", "stack", "view_as_real", "view_as_complex")
ROTARY_APIS = ("torch.cat", "torch.concat", "torch.concatenate", "torch.stack", "torch.view_as_real",
               "torch.view_as_complex")


def names_rotation(names: Set[str], may_denote: Callable[[List[str]], Set[str]]) -> bool:
    """The vocabulary of the cheap test: a concatenation, stack or complex view (by a local name
    that ``may_denote`` one), or a name with "rot" in it."""
    return bool(names & (set(ROTARY_NAMES) | may_denote(list(ROTARY_APIS)))) or any("rot" in n.lower() for n in names)

def _column_index(node: cst.Subscript) -> bool:
    """``t[..., 0]`` or ``t[..., 1]``."""
    elements = node.slice
    return len(elements) == 2 and isinstance(elements[0].slice, cst.Index) and \
        isinstance(elements[0].slice.value, cst.Ellipsis) and isinstance(elements[1].slice, cst.Index) and \
        isinstance(elements[1].slice.value, cst.Integer) and elements[1].slice.value.value in ("0", "1")


class Rotary(Rule):
    declarations = (
        DiagnosticCode(FUSED, "rotary",
                       "rotary position embedding (half, interleaved, pair-table or complex form) → guarded "
                       "torch_npu.npu_rotary_mul", rewrites=True, example="rotary_half", doc=__doc__),
        DiagnosticCode(REPORTED, "rotary-unfused",
                       "rotary embedding that is not rewritten (operands that are not plain names, a form the kernel "
                       "does not take, or a rotation defined in another module)", example="rotary_unfused",
                       doc=__doc__),
    )
    triggers = (b"cat", b"stack", b"view_as_complex", b"view_as_real")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._mentions: Dict[int, bool] = {}
        self._regions: list = []  # statement ranges of the regions emitted in this file
        self._by_name: Optional[Dict[str, List[cst.FunctionDef]]] = None

    # -- which functions ------------------------------------------------------------------------
    @classmethod
    def may_find(cls, words) -> bool:
        """``_may_rotate`` for some function (with the functions it calls), and the ops of a match."""
        helpers = words.callees()
        return any(names_rotation(r.names, words.may_denote) and may_rotate(words, r, helpers)
                   for r in map(words.reach, words.functions))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self.ctx.is_helper or not self._may_rotate(node, set()):
            return
        view = self.ctx.view(node)
        for rope in ropes(view):
            if not self.ctx.migrated(rope.out.node):  # migrated before: its guard's fallback keeps the original
                self._site(rope, view)
        for found in unmatched(view):
            if not self.ctx.migrated(found.value.node):
                self._unmatched(found)

    def _may_rotate(self, func: cst.FunctionDef, seen: set) -> bool:
        """Cheap and necessary for a match: the function, or a function of this module or class it
        calls (inlined by the view), names a concatenation, stack or complex view, or a rotation
        (a name with "rot" in it: an imported ``rotate_half`` is reported)."""
        found = self._mentions.get(id(func))
        if found is None:
            seen.add(id(func))
            names = self.ctx.tree.names(func)
            found = names_rotation(names, self.ctx.names.may_denote) or self._may_apply_matrix(func, names) or any(
                self._may_rotate(callee, seen) for callee in self._callees(func, names) if id(callee) not in seen)
            self._mentions[id(func)] = found
        return found

    def _may_apply_matrix(self, func: cst.FunctionDef, names: Set[str]) -> bool:
        """Cheap and necessary for ``_matrix.applied`` in ``func`` itself: ``einsum``, ``squeeze`` of a
        product with an ``unsqueeze``d vector, or columns taken as ``t[..., 0]`` and ``t[..., 1]``."""
        if "einsum" in names or {"squeeze", "unsqueeze"} <= names:
            return True
        return bool(names & {"reshape", "view", "unsqueeze"}) and any(
            _column_index(node) for node in self.ctx.tree.of_type(func, cst.Subscript))

    def _callees(self, func: cst.FunctionDef, names) -> List[cst.FunctionDef]:
        """The functions of this module (at any level) that ``func`` may call by one of its names."""
        if self._by_name is None:
            self._by_name = {}
            for node in self.ctx.tree.of_type(self.ctx.module, cst.FunctionDef):
                self._by_name.setdefault(node.name.value, []).append(node)
        return [f for name in names for f in self._by_name.get(name, ())]

    # -- a match --------------------------------------------------------------------------------
    def _site(self, rope: Rope, view) -> None:
        operands = [rope.x, rope.cos] + ([rope.sin] if rope.sin is not None else [])
        why = emit(self, view, rope.out, operands, lambda piece: self._write(rope, piece), note=NOTE, target=TARGET,
                   api=self._record(rope), helpers=[HELPER], taken=self._regions)
        if why is not None:
            self._report(rope.out.node, "operands", self._operands_message(rope, why))

    def _write(self, rope: Rope, piece):
        """The rotation written with x, cos (and sin) where the guard runs, or why not."""
        flag = operand_text(piece, rope.switch.flag) if rope.switch is not None else None
        if rope.switch is not None and flag is None:
            return unavailable("the flag that chooses the rotation's mode is not a plain name where the guard would "
                               "run (the guard and the call read it)")
        mode = f'("{rope.switch.when_true}" if {flag} else "{rope.switch.when_false}")' if flag else f'"{rope.mode}"'
        choices = [(rope.x, False)]
        if rope.pairs is not None:
            choices.insert(0, (rope.pairs, True))  # the code's own pairs tensor, when it has a name
        tables = [operand_text(piece, value) for value in (rope.cos, rope.sin) if value is not None]
        for x, paired in choices:
            text = operand_text(piece, x)
            if text is not None and None not in tables:
                return self._calls(rope, [text, *tables], paired, mode, flag)
        cast = self._cast(rope, piece)
        if cast is not None and None not in tables:
            return self._calls(rope, [f"{cast[0]}.to({cast[1]})", *tables], False, mode, flag, cast)
        return unavailable("x, cos and sin must be plain names (the guard reads them twice)")


    @staticmethod
    def _cast(rope: Rope, piece) -> Optional[tuple]:
        """(x before the cast, the dtype) for a per-channel rotation of ``x.float()``-like operands."""
        x = rope.x
        if rope.form != FULL or x.op != Op.CAST or x.input is None:
            return None
        base = operand_text(piece, x.input)
        dtype, other = x["dtype"], x["other"]
        if other is not None:
            target = operand_text(piece, other)
            dtype_text = f"{target}.dtype" if target is not None else None
        elif dtype is not None and dtype.op == Op.NAME and (dtype.name or "").startswith("torch."):
            dtype_text = dtype.name
        else:
            dtype_text = operand_text(piece, dtype) if dtype is not None else None
        return (base, dtype_text) if base is not None and dtype_text is not None else None

    def _calls(self, rope: Rope, texts: List[str], paired: bool, mode: str, flag: Optional[str],
               cast: Optional[tuple] = None):
        """The guarded call as source; ``paired``: x is given as its channel pairs; ``mode``: the mode
        argument's source (``("interleave" if <flag> else "half")`` for a mode the ``flag`` chooses);
        ``cast``: (x, dtype) when x is cast for the rotation (the guard reads x without the cast)."""
        x = texts[0]
        sin = f"-{texts[2]}" if rope.negated and len(texts) > 2 else None  # the other sign: sin negated
        if rope.switch is not None:
            switch = rope.switch
            how = f"{switch.when_true} rotation where {flag} is true, else {switch.when_false}: chosen at run time"
        else:
            how = f"{rope.mode} rotation"
        if rope.negated:
            how += ", the other sign: sin negated"
        if rope.form == FULL:
            guard_args = f'{cast[0]}, {cast[1]}, {texts[1]}, {texts[2]}, {mode}' if cast else \
                f'{x}, {texts[1]}, {texts[2]}, {mode}'
            guard = f"{HELPER}.rotary_fits_cast({guard_args})" if cast else f"{HELPER}.rotary_fits({guard_args})"
            fused = f'{HELPER}.rotary_mul({x}, {texts[1]}, {sin or texts[2]}, {mode})'
        elif rope.form == COMPLEX:
            call = ", ".join(texts)
            guard, fused = f"{HELPER}.complex_rotary_fits({call})", f"{HELPER}.complex_rotary_mul({call})"
            how = f"complex table {texts[1]}, real cos/sin derived once per table"
        else:
            options = (", paired=True" if paired else "") + (", split=True" if rope.split else "")
            guard = f"{HELPER}.pair_rotary_fits({', '.join(texts)}, {mode}{options})"
            fused = f"{HELPER}.pair_rotary_mul({texts[0]}, {texts[1]}, {sin or texts[2]}, {mode}{options})"
            if rope.paired and not paired:
                fused += ".unflatten(-1, (-1, 2))"
            elif paired and not rope.paired:
                fused += ".flatten(-2)"
            how += f", pair tables {texts[1]}/{texts[2]} made per-channel once per table"
        check = guard.split("(")[0]
        when = []
        if rope.rank and rope.form != FULL:  # the code indexes x as 4-D (rotary_fits requires it anyway)
            when.append(f"{x}.dim() == {rope.rank + 1 if paired else rope.rank}")
        guard = sited(guard, when)
        subject = cast[0] if cast else x
        message = f"rotary embedding of {subject} ({how}) → {TARGET}(rotary_mode={mode.replace(chr(34), chr(39))}), " \
                  f"guarded by {check}"
        needs = [ImportSpec("torch")] if cast and cast[1].startswith("torch.") else []
        return Written(guard, fused, message, imports=tuple(needs))

    def _record(self, rope: Rope) -> str:
        if rope.switch is not None:
            return RECORDS["switched"]
        return RECORDS[rope.mode if rope.form == FULL else rope.form]

    # -- reports --------------------------------------------------------------------------------
    def _operands_message(self, rope: Rope, why: Optional[str]) -> str:
        text = code(rope.out.node).strip()
        how = f"{rope.mode} rotation" if rope.form == FULL else f"{rope.form} form"
        if rope.switch is not None:
            how = f"{rope.switch.when_true} or {rope.switch.when_false} rotation, chosen by a flag"
        return f"rotary embedding `{text}` ({how}) is not rewritten: {why or 'its operands are not available'}"

    def _unmatched(self, found: Unread) -> None:
        value, kind = found.value, found.kind
        text = code(value.node).strip()
        if kind == "complex":
            message = (f"complex-number rotary embedding `{text}` is not rewritten: not of the form "
                       "view_as_real(view_as_complex(x) * freqs_cis)")
        elif kind == "rotation":
            message = f"rotary embedding `{text}` is not rewritten: {why_unproven(found.about, found.x)}"
        elif kind == "matrix":
            message = f"rotary embedding `{text}` is not rewritten: {why_not_rotation_matrix(found.about, found.x)}"
        else:
            kind, why = self._helper(found.about)
            message = f"rotary embedding `{text}` is not rewritten: {why}"
        self._report(statement_of(value.node, self.ctx.tree.parents()) if kind == "complex" else value.node, kind,
                     message)

    def _helper(self, call) -> Tuple[str, str]:
        """(kind, reason) for a rotation computed by a call the view did not inline: a function of this
        file it could not read ('local', with the view's reason), or one of another module ('helper')."""
        callee = call["callee"]
        name = code(callee.node).strip() if callee.node is not None else callee.name
        why = call.view.unread.get(id(call.node)) if call.view is not None else None
        if why is not None:
            return "local", f"its rotation `{name}` is defined in this file but not read: {why}"
        root = name.split(".")[0]
        module = self._imported_from(root)
        if module is not None:
            return "helper", (f"its rotation `{name}` is a function of another module, which this file imports from "
                              f"`{module}`; the rule reads one file at a time, so it does not see which rotation that "
                              "function computes")
        if self._defines(root):
            return "local", (f"its rotation `{name}` is bound more than once in this file, so which function runs "
                             "is not known")
        return "helper", f"its rotation `{name}` is neither defined nor imported by name in this file"

    def _imported_from(self, local: str) -> Optional[str]:
        """The module, as this file writes it, that an import at its top binds ``local`` from
        (``..llama.modeling_llama`` for ``from ..llama.modeling_llama import rotate_half``, ``.`` for
        ``from . import utils``, ``m.n`` for ``import m.n as local``), or None."""
        for stmt in self.ctx.module.body:
            for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
                if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                    bound = [a.asname.name if a.asname is not None else a.name for a in small.names]
                    if any(isinstance(b, cst.Name) and b.value == local for b in bound):
                        return "." * len(small.relative) + (code(small.module) if small.module is not None else "")
                elif isinstance(small, cst.Import):
                    for alias in small.names:
                        full = code(alias.name)
                        if (alias.asname.name.value if alias.asname is not None else full.split(".")[0]) == local:
                            return full
        return None

    def _defines(self, name: str) -> bool:
        """Whether a ``def`` at the top of this module binds ``name`` (not once: the view reads those)."""
        return any(isinstance(stmt, cst.FunctionDef) and stmt.name.value == name for stmt in self.ctx.module.body)

    def _report(self, node: cst.CSTNode, kind: str, message: str) -> None:
        record = self.ctx.table.exact(RECORDS[kind])
        fallback = record.fallback if record is not None and record.fallback else Fallback("manual", message)
        self.report(node, message, fallback=fallback, api=RECORDS[kind], code=REPORTED)
