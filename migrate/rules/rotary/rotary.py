"""NPU310/NPU311: rotary position embedding → ``torch_npu.npu_rotary_mul``.

Every rotary embedding the dataflow view reads (``rotary._match``: per-channel tables
``x * cos + rotate(x) * sin`` in half or interleaved rotation, pair tables as in torchtune's packed
``[cos|sin]`` cache, complex ``freqs_cis``, 2x2 rotation-matrix tables built in the function) becomes a
guarded call of the vendored helper, which checks at run time what cannot be proven statically (4-D,
dtypes, D even and < 896, a cos/sin shape the kernel takes; never the tables' values: the kernel takes
any) and otherwise runs the original code::

    q_embed = npu_glue.rotary_mul(q, cos, sin, "half") if npu_glue.rotary_fits(q, cos, sin, "half") else <original>

The rotation by -θ (``x * cos - rotate_half(x) * sin``, ``(x1*c + x2*s, x2*c - x1*s)``) is the kernel with
``-sin``; a rotation helper that branches on a flag between the half and the interleaved rotation
(flash-attn's ``rotate_half(x, interleaved)``) gets the mode the flag chooses at run time,
``"interleave" if interleaved else "half"``, in the guard and in the call.

When the rotation is computed by statements of its own before the sum (litgpt's ``apply_rope``:
``x1 = ...; x2 = ...; rotated = torch.cat((-x2, x1), -1)``), those statements move into the
fallback branch of a guarded region (def-use checked), so the fused path does not compute them.
Pair and complex tables become per-channel tables in the helper, derived from their current values
on every call.

Reported instead (NPU311, with a plan and the reason the match stopped, naming the code): operands
that are not plain names or cheap views (the guard reads them twice), complex products the form does
not cover, sums over a rotation helper imported from another module (named as the file imports it: the
rule reads one file at a time) or defined in the file but not read by the view (it says why),
concatenations not proven to be x's rotation (the split point, the dim, the pieces), 2x2 tables not
proven to be rotation matrices, and regions that would not be sound.
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
