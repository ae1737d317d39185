"""NPU302/NPU303: hand-written attention (any spelling the dataflow view reads) → a guarded
npu_fusion_attention, or reported with a plan where the kernel cannot express it exactly or the
region would not be sound (``migrate.defuse``). Each code's page is its part below.

# NPU302
## What it does
Finds attention written out in a function or method: scores from `torch.matmul`/`@` of q and a
transposed k (`k.transpose(-2, -1)`, `transpose(2, 3)`, `.mT`), an optional scale (`* scaling`, `/
math.sqrt(d)`), optional masks (`+ attention_mask`, also under `if attention_mask is not None:`;
`masked_fill(cond, -inf or finfo.min)`; `torch.where(keep, w, finfo.min)`), `softmax(dim=-1)` (any
alias, optionally in float32 and cast back; a softmax module of the class, `self.attend =
nn.Softmax(dim=-1)` alone or in an `nn.Sequential` with dropout, or one built in place,
`nn.Softmax(dim=-1)(scores)`; the stabilising `scores - scores.amax(-1, keepdim=True)` before it),
optional dropout (`F.dropout` or an `nn.Dropout` attribute of the class), then the product with v.
Probabilities zeroed after the softmax with the scores' own mask (`attn.masked_fill(~mask, 0.0)`,
which only clears the rows with every key masked) are fused with `zero_dead_rows=True`: those rows
get zeros from the fused call (where a gradient is needed, a call with such a row runs the original,
whose gradient there is NaN under a minus-infinity fill). An additive buffer named like a bias but
built in the class as a 0 / minus-infinity mask (`torch.triu(torch.full(..., float("-inf")), 1)`)
is a mask. Grouped-query attention (k and v repeated by
Hugging Face's `repeat_kv` or by `repeat_interleave`) uses the kernel's own GQA: k and v are passed
with their own head count, and the repetition moves into the fallback when nothing else reads it.
The run of statements becomes

```python
if npu_glue.can_fuse(q, k, v, ...):
    out = npu_glue.fusion_attention(q, k, v, q.shape[1], ...)
else:
    <the original statements>
```

`npu_glue.fusion_attention` calls `torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", ...)[0]`;
under AMP it first casts q, k and v to autocast's dtype, as the original's matmuls do.

A slice of a causal buffer (built with `torch.tril(torch.ones(...))` in the class, sliced `[:, :,
:T, :T]` or `[:, :, K - Q:K, :K]`) is handed to the kernel as its mask: `npu_glue.npu_mask(q, k,
causal=<slice>)` converts its current values on every call (zeros are masked out). The buffer may be
filled (a prefix-LM's `fill_(1)`), loaded or written through `.data` after `__init__`, so its
contents are never taken for the kernel's causal `sparse_mode`. Other masks are converted at run
time by `npu_glue.npu_mask` the same way (True = masked out).

## Why
The fused kernel never forms the [B, N, Sq, Skv] probabilities, which is the whole memory and speed
win on an Ascend NPU, but it is exact only when its preconditions hold (dtype, rank, head dim, mask
values). Those are checked at run time; the original code stays, unchanged, as the fallback.

When the probabilities are used after the product with V, the fused path runs only under a run-time
condition that says they are not: a function parameter that guards their use (`(out, probs) if
output_attentions else (out,)` → `and not output_attentions`), or, for Hugging Face's
`eager_attention_forward(module, ..., **kwargs)` returning `(attn_output, attn_weights)`, `not
npu_glue.attention_weights_requested(module, kwargs)`. transformers 5.x records the returned weights
only through its output-capturing hooks, which are active only when `output_attentions` is passed to
the call (it then reaches the attention function's `**kwargs`) or set in the config; the fused path
returns `attn_weights = None` otherwise, as the SDPA implementation does. A head mask applied under
`if head_mask is not None:` adds `and head_mask is None`. Anything else is reported by NPU303.

## Fix safety
Guarded: `npu_glue.can_fuse` requires 4-D q/k/v, q and k of one float16/bfloat16/float32 dtype, D ≤
768, Nq ≤ 256 and a multiple of Nkv, masks that broadcast to the scores, additive masks with only 0
and values ≤ dtype min / 2, a causal slice covering the whole score matrix, and no fully masked row
(the eager softmax gives NaN or a uniform average there, which the kernel alone does not reproduce),
unless `npu_glue.fusion_attention` gives such rows the original's value on the device: with one
additive mask, scores not in float16 and no gradient needed, it zeroes the row's query and opens the
keys whose mask value is the row's largest, so the kernel's softmax is the original's uniform one
(NaN where that value is minus infinity), with no host synchronisation. When P was cast to V's dtype
(GPT-J computes the scores in float32), the kernel runs in q's dtype and the output is cast to V's
dtype. Mask order does not matter because only 0 / minus-infinity masks convert. The value
conditions (0 / minus infinity, no fully masked row) are read on every call, one host
synchronisation per call, unless a rule proves them from code in the same function: a verdict kept
between calls could be stale (`docs/design.md`, "Derived state"). Proven under the emulator and by
`migrate parity` on the nanoGPT, Llama-GQA, BERT and GPT-J fixtures.

## Known problems
Dropout inside the kernel draws a different random pattern (equal in distribution). Batches with a
fully masked query row (left padding with a causal mask) run the original code for the whole call
where the row cannot be given the original's value on the device (several masks, float16 scores,
training). Scores from `torch.bmm` (3-D) are not rewritten. A scale given as a tensor attribute is
passed as `float(...)`, which synchronises once per call. Mask expressions are written twice (guard
and call).

# NPU303
## What it does
Reports hand-written attention that NPU302 recognises but must not rewrite: logit soft-capping
(`tanh(x / cap) * cap`), attention sinks (a logit column concatenated before the softmax), a
position bias added to the scores (T5's `position_bias`, ALiBi's `baddbmm` with the bias as input),
a head mask multiplying the probabilities unconditionally, probabilities used after the product with
V with no run-time condition that says they are not, and scores from `einsum` or from `baddbmm(...,
beta=0, alpha=scale)` (GPT-2's `reorder_and_upcast_attn` path: only the scaled product, on 3-D
operands the rule does not prove to be Q and Kᵀ with the heads merged). The softmax of an `einsum`
or `baddbmm` may follow outside the block, as after GPT-2's `with torch.autocast(...,
enabled=False):`. Also reported: scores masked with a large finite value instead of minus infinity,
q, k or v of a rank the kernel does not take, and attention whose statements cannot move into a
guarded region soundly (`migrate.defuse`: the fused call would read what the moved statements
define, or later code reads what only one branch defines). Where the rule stops between the softmax
and V, the report says at what: an operation on the probabilities (`attn.clamp(...)`, a reshape), a
branch that reassigns them, probabilities zeroed with another mask, scores computed differently in
branches or concatenated from several products, and scores that are the sum of two products
(DeepSeek's latent attention, MLA, in its absorbed form; LiLT's text and layout streams), with a plan
each. A softmax over anything but q·kᵀ scores (a sampler, dual-softmax matching) is not attention.

## Why
`npu_fusion_attention` computes `softmax(scale * (QKᵀ + pse) masked) V` and never forms the
probabilities. Each reported form either changes the logits in a way the kernel has no argument for,
or needs the probabilities, so a rewrite would be silently wrong.

## Fix safety
Reported only (plan `composite`, `custom-kernel` or `manual`); the code is unchanged. Each form's
plan is a named plan of `opmap/attention.yaml` (`migrate ops show attention.softcap`, ...).

## Known problems
A bias is told from a mask by its name (`bias`, `position`, `alibi`, `pse`, `rel`); an unnamed bias
is taken as a mask by NPU302, whose run-time check then finds values that are neither 0 nor minus
infinity and runs the original code, so it is safe but not reported. GPT-J's `_attn`, which returns
the probabilities to a caller that discards them, is reported: the rule does not follow calls across
methods.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

import libcst as cst

from ...context import HELPER
from ...defuse import read
from ...diagnostics import DiagnosticCode
from ...edits import ImportSpec, Replace, template
from ...parens import atom
from ._blockers import MOVED_PLAN, probabilities_used
from ...refusal import Refusal, RefusalKind, blocked, unavailable, unbound, unplaced
from ._definitions import causal_alignment, is_tril_buffer
from ._match import Attention, repeated_heads
from ._rank import RANK_PLAN, Shaped, shaped
from ._function_rule import FunctionRule
from ...view.emit import Written, place, sited
from ._later_uses import load_sites_after
from ...view.values import number
from ...view.regions import Slice, enclosing_block, interior, operand_code, slice_of, statement_of
from ...view.syntax import code
from ..base import Rule
from ...view.ops import Op

TARGET = "torch_npu.npu_fusion_attention"
RECORD = "pattern.attention.eager"  # its op-table record (a status other than fused turns the rule off)
BLOCKED_RECORD = "pattern.attention.unfusable"
REPORT = "NPU303"
WIDTH = 100
NOTE = "npu-migrate NPU302: fused attention where npu_glue.can_fuse proves it exact, else the original"
NUMBER_ANNOTATIONS = ("float", "int")


def _wrap(items: List[str], indent: str, margin: int) -> str:
    """Comma-separated items on lines of at most WIDTH - margin characters, each starting with indent."""
    lines, line = [], ""
    for item in items:
        piece = f"{item},"
        if line and margin + len(indent) + len(line) + 1 + len(piece) > WIDTH:
            lines.append(indent + line)
            line = piece
        else:
            line = f"{line} {piece}" if line else piece
    lines.append(indent + line)
    return "\n".join(lines)


def _parenthesized(text: str, value) -> str:
    simple = value.op in (Op.CONST, Op.PARAM, Op.FREE, Op.NAME, Op.ATTR, Op.CALL, Op.GETITEM)
    return text if simple else f"({text})"


def python_number(value, view, depth: int = 0) -> bool:
    """The value is a Python number (not a tensor): literals, ``math.*`` calls, sizes, shapes, and
    parameters annotated ``float``/``int``; arithmetic of those."""
    if value is None or depth > 8:
        return False
    if value.op == Op.CONST:
        return value.number is not None
    if value.op == Op.PARAM:
        param = next((p for p in (*view.func.params.params, *view.func.params.kwonly_params,
                                  *view.func.params.posonly_params) if p.name.value == value.name), None)
        return param is not None and param.annotation is not None and code(param.annotation.annotation) in NUMBER_ANNOTATIONS
    if value.op in (Op.SIZE, Op.NDIM):
        return True
    if value.op == Op.CALL and (value.name or "").startswith("math."):
        return True
    if value.op == Op.GETITEM and value.input is not None and value.input.op == Op.ATTR and value.input.name == "shape":
        return True
    if value.op in (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.FLOORDIV):
        return python_number(value.input, view, depth + 1) and python_number(value["other"], view, depth + 1)
    if value.op == Op.NEG:
        return python_number(value.input, view, depth + 1)
    return False


READ_AFTER = (RefusalKind.READ_AFTER_ORIGINAL_ONLY, RefusalKind.READ_AFTER_FUSED_ONLY)


class EagerAttention(FunctionRule, Rule):
    declarations = (
        DiagnosticCode("NPU302", "eager-attention",
                       "hand-written attention → torch_npu.npu_fusion_attention, guarded, the original kept as "
                       "fallback", rewrites=True, example="eager_aliased", doc=__doc__),
        DiagnosticCode(REPORT, "eager-attention-unfused",
                       "attention the fused kernel cannot express exactly is reported with a plan",
                       example="unfusable", doc=__doc__),
    )
    triggers = (b"softmax", b"Softmax")

    def found(self, result, view) -> None:
        if isinstance(result, Refusal):
            parents = self.ctx.tree.parents()
            node = result.node if result.node is not None and _within(result.node, view.func, parents) else \
                result.root
            anchor = statement_of(node, parents) if node is not None else view.func
            self.report(anchor, f"attention not fused: {result.reason}", fallback=result.fallback, api=BLOCKED_RECORD,
                        code=REPORT)
            return
        attempts = []
        k0, v0 = repeated_heads(result.k), repeated_heads(result.v)
        if k0 is not None and v0 is not None:
            attempts.append((k0, v0))  # native GQA: the kernel takes K/V with fewer heads
        attempts.append((result.k, result.v))
        why = None
        for k, v in attempts:
            outcome = self._fuse(result, view, k, v)
            if outcome is None:
                return
            why = why or outcome
        why = why.planned(MOVED_PLAN)
        anchor = statement_of(result.out.node, self.ctx.tree.parents())
        self.report(anchor, f"attention not fused: {why.reason}", fallback=why.fallback, api=BLOCKED_RECORD, code=REPORT)

    # -- one attempt ---------------------------------------------------------------------------
    def _fuse(self, att: Attention, view, k, v) -> Optional[Refusal]:
        """Emit the rewrite with these K and V operands; None when done, else why not."""
        parents = self.ctx.tree.parents()
        operands = [att.q, k, v, *(t.value for t in att.terms), *(t.condition for t in att.terms if t.condition),
                    *(test.input for test in att.unless)]
        operands += [x for x in (att.scale, att.dropout and att.dropout["p"], att.dropout and att.dropout["training"],
                                 att.dropout and att.dropout["module"]) if x is not None]
        piece = slice_of(view, att.out, operands, parents)
        if isinstance(piece, Refusal):
            return piece
        form = self._output(att, parents, view)
        if form[0] == "inside":  # the fused value goes through a temporary; the statement using it follows the region
            inside = [v for v in interior(att.out, operands) if v is not att.out and view.home(v)
                      and _statement_index_of(piece, v.node, parents) == piece.end - 1]
            if inside:
                return unplaced("part of the attention is computed in the statement that uses its output")
            piece = Slice(piece.view, piece.block, piece.start, piece.end - 1,
                          tuple(i for i in piece.hoisted if i < piece.end - 1))
            if piece.start >= piece.end:
                return unplaced("the attention is written in one expression inside a larger one (assign it to a name "
                                "first)")
        shape = shaped([att.q, k, v])
        if isinstance(shape, Refusal) or shape.rank not in (None, 4) and k is not att.k:
            return shape if isinstance(shape, Refusal) else blocked(None, "K and V repeated for grouped heads are not 4-D",
                                                                   MOVED_PLAN)
        texts = {}
        for name, value in (("q", att.q), ("k", k), ("v", v)):
            texts[name] = operand_code(piece, value)
            if texts[name] is None:
                return unavailable(f"the {name} operand is not available as a plain name where the attention starts")
            texts[name] = shape.operand(texts[name])
        spec = self._spec(att, view, piece, texts, (att.k, texts["k"]) if k is not att.k else None, shape)
        if isinstance(spec, Refusal):
            return spec
        guard, masks = spec
        for test in att.unless:  # fused only without the head mask
            subject = operand_code(piece, test.input)
            if subject is None:
                return unavailable("the head mask or soft-cap is not available as a plain name where the attention "
                                   "starts")
            guard.append(f"{subject} is None")
        how = "the causal buffer's values as the mask" if masks and masks[0][0] == "causal" else (
            "masks converted at run time" if masks else "no mask")
        message = f"attention ({form[1]} = softmax(QK^T)V, {how}{shape.described}) → {TARGET}, guarded by " \
                  f"{HELPER}.can_fuse"
        inside = form[0] == "inside"  # the statement using the output reads it from the temporary afterwards
        tail = [template(f"{form[1]} = {{out}}\n", out=att.out.node)] if inside else []
        also = [Replace(att.out.node, cst.Name(form[1]), holes_see_original=True)] if inside else []
        probs_guards, probs_none = [], []
        for _ in range(3):
            written = self._code(att, piece, texts, form, (guard, probs_guards), masks, probs_none, shape)
            if written is None:
                return unavailable("the scale is not available as a plain expression where the attention starts")
            test, call, after = written
            problem = place(self, view.func.body, piece,
                            Written(test, call, message, () if form[0] == "return" else (form[1],), tuple(after)),
                            note=NOTE, target=TARGET, api=RECORD, helpers=[HELPER], imports=[ImportSpec("torch_npu")],
                            returned=form[0] == "return", tail=tail, replaced=att.out.node if inside else None,
                            also=also)
            if problem is None:
                return None
            used = self._probabilities_read_after(att, piece, problem)
            if used is None:
                return problem
            flag = self._probs_guard(view, piece, used)
            if flag is None:
                return probabilities_used(None, used)
            probs_guards.append(flag)
            probs_none.append(used)
        return unbound("the attention probabilities are used afterwards")

    def _output(self, att: Attention, parents, view) -> Tuple[str, str]:
        """("assign", name) for ``name = <attention>``, ("return", "the result") for ``return
        <attention>``, ("inside", a new name) when a larger expression uses it (through that name)."""
        parent = parents.get(id(att.out.node))
        if isinstance(parent, cst.Assign) and parent.value is att.out.node and len(parent.targets) == 1 \
                and isinstance(parent.targets[0].target, cst.Name):
            return "assign", parent.targets[0].target.value
        if isinstance(parent, cst.AnnAssign) and parent.value is att.out.node and isinstance(parent.target, cst.Name):
            return "assign", parent.target.value
        if isinstance(parent, cst.Return) and parent.value is att.out.node:
            return "return", "the returned value"
        used = self.ctx.tree.names(view.func)
        name = next(n for n in ("attn_output", "attention_output", "attn_out", "attn_output_npu") if n not in used)
        return "inside", name

    def _spec(self, att: Attention, view, piece: Slice, texts, repeated=None, shape: Shaped = Shaped()):
        """(guard terms, masks) for the fused call, or why it cannot be written. ``repeated``: (the
        K repeated for GQA, source of the K it repeats) when the kernel gets the latter; ``shape``: how
        q/k/v of the rank the code gives them reach the kernel (masks follow them)."""
        masks: List[Tuple[str, str]] = []  # (kind, code) or ("causal", mode, slice code)
        cls = view.scope.cls
        for term in att.terms:
            causal = self._causal(term, cls, view)
            text = operand_code(piece, term.value)
            if text is None and repeated is not None:
                text = _sequence_length_of(piece, term.value, *repeated)
            if causal is None and text is None:
                return unavailable("a mask is not available as a plain expression where the attention starts")
            if text is not None and causal is None:
                text = shape.mask(text, term.value)
                if text is None:
                    return blocked(None, "a mask of 3-D attention (heads merged into the batch) whose rank the code "
                                         "does not fix", RANK_PLAN)
            if term.condition is not None:
                condition = operand_code(piece, term.condition) if term.condition.node is None else \
                    _condition_code(piece, term.condition)
                if condition is None:
                    return unavailable("the condition of a mask is not available where the attention starts")
                subject = condition.split(" is not ")[0]
                if text != subject:
                    text = atom(f"{text} if {condition} else None")
            masks.append((term.kind, text, causal))
        if len(masks) == 1 and masks[0][2] is not None:
            return [], [("causal", masks[0][2][0], masks[0][2][1])]
        if any(m[1] is None for m in masks):
            return unavailable("a mask is not available as a plain expression where the attention starts")
        return [], [(kind, text) for kind, text, _ in masks]

    def _causal(self, term, cls, view) -> Optional[Tuple[int, str]]:
        """(sparse mode, slice code) when the term is a slice of a buffer built lower-triangular (the
        kernel gets the slice's values, never the sparse mode: the buffer can change after __init__)."""
        value = term.value
        if term.condition is not None:
            return None
        if term.kind == "masked" and value.op == Op.COMPARE and value.name == "Equal" and number(value["other0"]) == 0:
            value = value.input
        elif term.kind != "keep":
            return None
        while value is not None and value.op in (Op.CAST, Op.SAME):
            value = value.input
        if value is None or value.node is None or not isinstance(value.node, cst.Subscript):
            return None
        found = causal_alignment(value.node)
        if found is None or not is_tril_buffer(cls, found[0], self.qualified_name):
            return None
        return found[1], atom(code(value.node))

    def _code(self, att: Attention, piece: Slice, texts, form, guard_terms, masks, probs_none, shape: Shaped):
        """(guard, fused call, statements after it), or None; ``guard_terms``: (the site's own
        conditions, the expressions that say the probabilities are read afterwards)."""
        q, k, v = texts["q"], texts["k"], texts["v"]
        causal = masks[0] if masks and masks[0][0] == "causal" else None
        mask_args = [f"{kind}={text}" for kind, text in masks] if not causal else []
        mask_args += ["zero_dead_rows=True"] if att.zeroed is not None else []  # masked_fill(mask, 0) after the softmax
        extra = ([f"causal={causal[2]}"] if causal else []) + (["cast_value=True"] if att.value_cast else [])
        when, requested = guard_terms
        scale = None
        if att.scale is not None:
            raw = operand_code(piece, att.scale)
            if raw is None:
                return None
            scale = f"1 / {_parenthesized(raw, att.scale)}" if att.inverse else raw
            if not python_number(att.scale, piece.view):
                extra.append(f"scale={raw}")
                scale = f"float({scale})"
        extra += [f"weights_requested={' or '.join(requested)}"] if requested else []
        value = f"{v}.to({q}.dtype)" if att.value_cast else v
        args = [q, k, value, shape.heads(q)] + ([f"causal={causal[2]}"] if causal else mask_args)
        args.append(f"scale={scale or '1.0'}")
        keep = self._keep_prob(att, piece)
        if keep:
            args.append(f"keep_prob={keep}")
        indent, unit = self.ctx.indentation(piece.block)
        test = sited(f"{HELPER}.can_fuse({', '.join([q, k, v] + mask_args + extra)})", when)
        cast = f".to({v}.dtype)" if att.value_cast else ""
        call = f"{HELPER}.fusion_attention(\n{_wrap(args, unit, len(indent) + len(unit))}\n){shape.result}{cast}"
        return test, call, [f"{name} = None  # not formed by the fused kernel\n" for name in probs_none]

    def _keep_prob(self, att: Attention, piece: Slice) -> Optional[str]:
        dropout = att.dropout
        if dropout is None:
            return None
        module = dropout["module"]
        if module is not None:
            name = operand_code(piece, module)
            return atom(f"1 - {name}.p if {name}.training else 1.0")
        p = operand_code(piece, dropout["p"]) if dropout["p"] is not None else "0.5"
        if dropout["training"] is None:
            return atom(f"1 - {p}")
        return atom(f"1 - {p} if {operand_code(piece, dropout['training'])} else 1.0")

    # -- probabilities read afterwards -----------------------------------------------------------
    def _probabilities_read_after(self, att: Attention, piece: Slice, problem: Refusal) -> Optional[str]:
        """The name of the probabilities when ``problem`` is that they are read after the region."""
        if problem.kind not in READ_AFTER:
            return None
        name = problem.name
        after = piece.view.env_before.get(id(piece.block.body[piece.end])) if piece.end < len(piece.block.body) else None
        bound = (after or {}).get(name)
        if bound is None:
            bound = _final_binding(piece, name)
        return name if any(bound is p for p in att.probabilities) else None

    def _probs_guard(self, view, piece: Slice, name: str) -> Optional[str]:
        """A run-time expression that is true when the probabilities are used afterwards (the fused path runs
        when it is false)."""
        func = view.func
        end_stmt = piece.block.body[piece.end - 1]
        uses = load_sites_after(func.body, end_stmt, name)
        params = {p.name.value for p in (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params)}
        flags = set()
        for chain in uses:
            flag = next((t for t in chain if t in params), None)
            if flag is None:
                break
            flags.add(flag)
        else:
            if len(flags) == 1:
                return flags.pop()
        returned = uses and all(chain == ("<return>",) for chain in uses)
        star = func.params.star_kwarg.name.value if isinstance(func.params.star_kwarg, cst.Param) else None
        first = func.params.params[0].name.value if func.params.params else None
        if returned and star and first == "module":
            return f"{HELPER}.attention_weights_requested({first}, {star})"
        return None


SEQUENCE_LENGTH = re.compile(r"\.(shape\[(-2|2)\]|size\((-2|2)\))")


def _sequence_length_of(piece: Slice, mask, repeated, source: str) -> Optional[str]:
    """A mask that reads the repeated K only for its sequence length (``k.shape[-2]``), written
    with the K the kernel gets instead (repeating the heads keeps the sequence length)."""
    node = mask.node
    if node is None or not piece.view.home(mask):
        return None
    env = piece.view.env_before.get(id(statement_of(node, piece.view.parents)), {})
    names = [name for name, bound in env.items() if bound is repeated]
    text = code(node)
    for name in names:
        uses = len(re.findall(rf"\b{re.escape(name)}\b", text))
        lengths = len(re.findall(rf"\b{re.escape(name)}{SEQUENCE_LENGTH.pattern}", text))
        if uses != lengths:
            return None
        text = re.sub(rf"\b{re.escape(name)}(?={SEQUENCE_LENGTH.pattern})", lambda _: source, text)
    renamed = piece.view.value(node)  # the mask's other names must read the same at the guard
    for name in _names_in_text(text, names):
        if env.get(name) is not piece.guard_env().get(name):
            return None
    return atom(text) if names and renamed is mask else None


def _names_in_text(text: str, skip) -> List[str]:
    return [n for n in read([cst.parse_expression(text)]) if n not in skip]


def _statement_index_of(piece: Slice, node, parents) -> Optional[int]:
    block, index = enclosing_block(node, parents)
    while block is not None and block is not piece.block:
        block, index = enclosing_block(block, parents)
    return index if block is piece.block else None


def _within(node, func, parents) -> bool:
    while node is not None:
        if node is func:
            return True
        node = parents.get(id(node))
    return False


def _condition_code(piece: Slice, condition) -> Optional[str]:
    """The test of an ``if M is not None`` term, as source valid where the guard runs."""
    node = condition.node
    if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
        left = operand_code(piece, piece.view.value(node.left))
        right = operand_code(piece, piece.view.value(node.comparisons[0].comparator))
        if left is not None and right is not None:
            op = code(node.comparisons[0].operator).strip()
            return f"{left} {op} {right}"
    return operand_code(piece, condition)


def _final_binding(piece: Slice, name: str):
    """The value ``name`` holds after the region when it ends the function's body."""
    view = piece.view
    return view.env.get(name) if piece.block is view.func.body else None
