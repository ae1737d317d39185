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
  mistral-inference) → `npu_glue.complex_rotary_mul(x_complex, freqs_cis)`.

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
  rotates (`from .utils import rotate_half`, flash-attn's `rotate_half`): its body, and so the
  rotation mode, is not in the file;
- `x * cos + r * sin` where `r` concatenates or stacks a negated piece of x that is not proven to be
  its half or interleaved rotation (halves split at `self.head_size // 2` rather than at
  `x.shape[-1] // 2`, a concatenation on a computed dim).

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

from typing import Callable, Dict, List, Optional, Set

import libcst as cst

from ...context import HELPER
from ...diagnostics import DiagnosticCode
from ...edits import ImportSpec
from ...view.emit import Written, emit, operand_text, sited
from ...refusal import unavailable
from ...view.regions import statement_of
from ._match import COMPLEX, FULL, Rope, may_rotate, ropes, unmatched
from ...view.syntax import code
from ..base import Rule
from ....opmap import Fallback
from ...view.ops import Op

FUSED, REPORTED = "NPU310", "NPU311"
TARGET = "torch_npu.npu_rotary_mul"
RECORDS = {"half": "pattern.rotary.half", "interleave": "pattern.rotary.interleave", "pairs": "pattern.rotary.pairs",
           "complex": "pattern.rotary.complex", "operands": "pattern.rotary.operands",
           "helper": "pattern.rotary.helper", "rotation": "pattern.rotary.rotation"}
NOTE = "npu-migrate NPU310: fused rotary embedding where npu_glue proves it exact, else the original"
ROTARY_NAMES = ("cat", "concat", "concatenate", "stack", "view_as_real", "view_as_complex")
ROTARY_APIS = ("torch.cat", "torch.concat", "torch.concatenate", "torch.stack", "torch.view_as_real",
               "torch.view_as_complex")


def names_rotation(names: Set[str], may_denote: Callable[[List[str]], Set[str]]) -> bool:
    """The vocabulary of the cheap test: a concatenation, stack or complex view (by a local name
    that ``may_denote`` one), or a name with "rot" in it."""
    return bool(names & (set(ROTARY_NAMES) | may_denote(list(ROTARY_APIS)))) or any("rot" in n.lower() for n in names)

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
        for value, kind in unmatched(view):
            if not self.ctx.migrated(value.node):
                self._unmatched(value, kind)

    def _may_rotate(self, func: cst.FunctionDef, seen: set) -> bool:
        """Cheap and necessary for a match: the function, or a function of this module or class it
        calls (inlined by the view), names a concatenation, stack or complex view, or a rotation
        (a name with "rot" in it: an imported ``rotate_half`` is reported)."""
        found = self._mentions.get(id(func))
        if found is None:
            seen.add(id(func))
            names = self.ctx.tree.names(func)
            found = names_rotation(names, self.ctx.names.may_denote) or any(
                self._may_rotate(callee, seen) for callee in self._callees(func, names) if id(callee) not in seen)
            self._mentions[id(func)] = found
        return found

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
        choices = [(rope.x, False)]
        if rope.pairs is not None:
            choices.insert(0, (rope.pairs, True))  # the code's own pairs tensor, when it has a name
        tables = [operand_text(piece, value) for value in (rope.cos, rope.sin) if value is not None]
        for x, paired in choices:
            text = operand_text(piece, x)
            if text is not None and None not in tables:
                return self._calls(rope, [text, *tables], paired)
        cast = self._cast(rope, piece)
        if cast is not None and None not in tables:
            return self._calls(rope, [f"{cast[0]}.to({cast[1]})", *tables], False, cast)
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

    def _calls(self, rope: Rope, texts: List[str], paired: bool, cast: Optional[tuple] = None):
        """The guarded call as source; ``paired``: x is given as its channel pairs;
        ``cast``: (x, dtype) when x is cast for the rotation (the guard reads x without the cast)."""
        mode = rope.mode
        x = texts[0]
        if rope.form == FULL:
            sin = f"-{texts[2]}" if rope.negated else texts[2]
            guard_args = f'{cast[0]}, {cast[1]}, {texts[1]}, {texts[2]}, "{mode}"' if cast else \
                f'{x}, {texts[1]}, {texts[2]}, "{mode}"'
            guard = f"{HELPER}.rotary_fits_cast({guard_args})" if cast else f"{HELPER}.rotary_fits({guard_args})"
            fused = f'{HELPER}.rotary_mul({x}, {texts[1]}, {sin}, "{mode}")'
            how = f"{mode} rotation" + (", the other sign: sin negated" if rope.negated else "")
        elif rope.form == COMPLEX:
            call = ", ".join(texts)
            guard, fused = f"{HELPER}.complex_rotary_fits({call})", f"{HELPER}.complex_rotary_mul({call})"
            how = f"complex table {texts[1]}, real cos/sin derived once per table"
        else:
            call = f'{", ".join(texts)}, "{mode}"' + (", paired=True" if paired else "") + (", split=True" if rope.split else "")
            guard, fused = f"{HELPER}.pair_rotary_fits({call})", f"{HELPER}.pair_rotary_mul({call})"
            if rope.paired and not paired:
                fused += ".unflatten(-1, (-1, 2))"
            elif paired and not rope.paired:
                fused += ".flatten(-2)"
            how = f"{mode} rotation, pair tables {texts[1]}/{texts[2]} made per-channel once per table"
        check = guard.split("(")[0]
        when = []
        if rope.rank and rope.form != FULL:  # the code indexes x as 4-D (rotary_fits requires it anyway)
            when.append(f"{x}.dim() == {rope.rank + 1 if paired else rope.rank}")
        guard = sited(guard, when)
        subject = cast[0] if cast else x
        message = f"rotary embedding of {subject} ({how}) → {TARGET}(rotary_mode='{mode}'), guarded by {check}"
        needs = [ImportSpec("torch")] if cast and cast[1].startswith("torch.") else []
        return Written(guard, fused, message, imports=tuple(needs))

    def _record(self, rope: Rope) -> str:
        return RECORDS[rope.mode if rope.form == FULL else rope.form]

    # -- reports --------------------------------------------------------------------------------
    def _operands_message(self, rope: Rope, why: Optional[str]) -> str:
        text = code(rope.out.node).strip()
        how = f"{rope.mode} rotation" if rope.form == FULL else f"{rope.form} form"
        return f"rotary embedding `{text}` ({how}) is not rewritten: {why or 'its operands are not available'}"

    def _unmatched(self, value, kind: str) -> None:
        text = code(value.node).strip()
        if kind == "complex":
            message = (f"complex-number rotary embedding `{text}` is not rewritten: not of the form "
                       "view_as_real(view_as_complex(x) * freqs_cis)")
        elif kind == "rotation":
            message = (f"rotary embedding `{text}` is not rewritten: its rotation is not proven to be the half or "
                       "interleaved rotation of x's last dim (halves split at x.shape[-1] // 2, pairs at ::2)")
        else:
            message = (f"rotary embedding `{text}` is not rewritten: its rotation is a function defined in another "
                       "module, which this file does not show")
        self._report(statement_of(value.node, self.ctx.tree.parents()) if kind == "complex" else value.node, kind,
                     message)

    def _report(self, node: cst.CSTNode, kind: str, message: str) -> None:
        record = self.ctx.table.exact(RECORDS[kind])
        fallback = record.fallback if record is not None and record.fallback else Fallback("manual", message)
        self.report(node, message, fallback=fallback, api=RECORDS[kind], code=REPORTED)
