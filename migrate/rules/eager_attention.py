"""NPU302: hand-written attention (matmul, scale, mask, softmax, dropout, matmul) → npu_fusion_attention.

The run of statements becomes a guarded region, ``if npu_glue.can_fuse(...): <fused call> else:
<the original>``: the guard checks at run time what cannot be proven statically (4-D tensors,
dtype, head dim, mask values and fully masked rows, a scalar scale) and the original code stays as
the fallback, unchanged. A causal buffer proven lower-triangular (``torch.tril(torch.ones(...))`` in
the class) becomes a causal sparse mode with the compressed mask; other masks are converted to the
NPU's True = masked out. When the probabilities are used afterwards, the fused path runs only under
a run-time condition that says they are not (``not output_attentions``, Hugging Face's
``output_attentions`` request), and sets them to None there; otherwise NPU303 reports the site. So
does a run whose moved statements the fused call cannot stand in for (``migrate.defuse``).
"""

from __future__ import annotations

from typing import List, Tuple

from npu_migrate.migrate.context import HELPER
from npu_migrate.migrate.edits import ImportSpec, code
from npu_migrate.migrate.guarded import region
from npu_migrate.migrate.rules._attention_blockers import MOVED_PLAN
from npu_migrate.migrate.rules._attention_patterns import Fusion
from npu_migrate.migrate.rules._attention_rule import FunctionRule
from npu_migrate.migrate.rules.base import Rule

TARGET = "torch_npu.npu_fusion_attention"
REPORT = "NPU303"
WIDTH = 100
NOTE = "npu-migrate NPU302: fused attention where npu_glue.can_fuse proves it exact, else the original"


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


def fused_code(f: Fusion) -> Tuple[str, List[str]]:
    """The guard and the fused statements, as source (continuation lines relative to the statement:
    libcst adds the indentation of the block they end up in)."""
    masks = [f"{kind}={expr}" for kind, expr in f.terms.items()]
    extra = ([f"causal={f.causal[1]}"] if f.causal else []) + (["cast_value=True"] if f.cast_value else [])
    guard = [f"{HELPER}.can_fuse({', '.join([f.q, f.k, f.v] + masks + extra)})"]
    if f.scale and not f.scale_is_number:
        guard.append(f"{HELPER}.is_scalar({f.scale_operand})")
    guard += f.guards
    value = f"{f.v}.to({f.q}.dtype)" if f.cast_value else f.v
    args = [f.q, f.k, value, f"{f.q}.shape[1]", '"BNSD"']
    if f.causal:
        args += [f"atten_mask={HELPER}.causal_mask({f.q}.device)", f"sparse_mode={f.causal[0]}"]
    elif masks:
        args.append(f"atten_mask={HELPER}.npu_mask({', '.join([f.q, f.k] + masks)})")
    scale = (f.scale if f.scale_is_number else f"float({f.scale})") if f.scale else "1.0"
    args.append(f"scale={scale}")
    if f.keep_prob:
        args.append(f"keep_prob={f.keep_prob}")
    cast = f".to({f.v}.dtype)" if f.cast_value else ""
    test = " and ".join(guard)
    if len(f.indent) + len(test) + 4 > WIDTH:
        test = "(\n" + "\n".join(f"{f.unit}{'and ' if i else ''}{g}" for i, g in enumerate(guard)) + "\n)"
    fused = [f"{f.out} = {TARGET}(\n{_wrap(args, f.unit, len(f.indent) + len(f.unit))}\n)[0]{cast}\n"]
    if f.probs:
        fused.append(f"{f.probs} = None  # not formed by the fused kernel\n")
    return test, fused


class EagerAttention(FunctionRule, Rule):
    code = "NPU302"
    name = "eager-attention"
    summary = "hand-written attention → torch_npu.npu_fusion_attention, guarded, the original kept as fallback"
    triggers = (b"softmax",)

    def found(self, result, func) -> None:
        if not isinstance(result, Fusion):
            return
        guard, fused = fused_code(result)
        edit = region(func.body, result.block, result.start, result.end + 1, code(guard), [code(s) for s in fused],
                      note=NOTE, hoisted=result.hoisted, unit=result.unit)
        anchor = result.block.body[result.start]
        if isinstance(edit, str):
            self.report(anchor, f"attention not fused: {edit}", fallback=MOVED_PLAN, api="attention", code=REPORT)
            return
        how = f"sparse_mode={result.causal[0]} causal mask" if result.causal else (
            "masks converted at run time" if result.terms else "no mask")
        self.rewrite(anchor, f"attention ({result.out} = softmax(QK^T)V, {how}) → {TARGET}, guarded by {HELPER}.can_fuse",
                     target=TARGET, api="attention", edits=[edit], imports=[ImportSpec("torch_npu")], helpers=[HELPER])
