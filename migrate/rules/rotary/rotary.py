"""NPU310/NPU311: rotary position embedding → ``torch_npu.npu_rotary_mul``.

Every rotary embedding the dataflow view reads (``rotary._match``: per-channel tables
``x * cos + rotate(x) * sin`` in half or interleaved rotation, pair tables as in torchtune's packed
``[cos|sin]`` cache, complex ``freqs_cis``) becomes a guarded call of the vendored helper, which
checks at run time what cannot be proven statically (4-D, dtypes, D even and < 896, a cos/sin shape
the kernel takes; never the tables' values: the kernel takes any) and otherwise runs the original code::

    q_embed = npu_glue.rotary_mul(q, cos, sin, "half") if npu_glue.rotary_fits(q, cos, sin, "half") else <original>

When the rotation is computed by statements of its own before the sum (litgpt's ``apply_rope``:
``x1 = ...; x2 = ...; rotated = torch.cat((-x2, x1), -1)``), those statements move into the
fallback branch of a guarded region (def-use checked), so the fused path does not compute them.
Pair and complex tables become per-channel tables in the helper, derived from their current values
on every call.

Reported instead (NPU311, with a plan): operands that are not plain names or cheap views (the guard
reads them twice), complex products the form does not cover, sums over a rotation helper defined
in another module, and regions that would not be sound.
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
                       "torch_npu.npu_rotary_mul", rewrites=True, example="rotary_half"),
        DiagnosticCode(REPORTED, "rotary-unfused",
                       "rotary embedding that is not rewritten (operands that are not plain names, a form the kernel "
                       "does not take, or a rotation defined in another module)", example="rotary_unfused"),
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
