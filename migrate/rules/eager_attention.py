"""NPU302: hand-written attention (matmul, scale, mask, softmax, dropout, matmul) → npu_fusion_attention.

The run of statements becomes ``if npu_glue.can_fuse(...): <fused call> else: <the original>``:
the guard checks at run time what cannot be proven statically (4-D tensors, dtype, head dim, mask
values and fully masked rows) and the original code stays as the fallback, unchanged. A causal
buffer proven lower-triangular (``torch.tril(torch.ones(...))`` in the class) becomes a causal
sparse mode with the compressed mask; other masks are converted to the NPU's True = masked out.
When the probabilities are used afterwards, the fused path runs only under a run-time condition
that says they are not (``not output_attentions``, Hugging Face's ``output_attentions`` request),
and sets them to None there; otherwise NPU303 reports the site.
"""

from __future__ import annotations

from typing import Dict, List

import libcst as cst

from npu_migrate.migrate.rules._attention_patterns import Fusion
from npu_migrate.migrate.rules._attention_rule import FunctionRule
from npu_migrate.migrate.rules.base import Fix, ImportSpec, Rule

TARGET = "torch_npu.npu_fusion_attention"
WIDTH = 100


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


def fused_statements(f: Fusion) -> str:
    """The guard and the fused call of the then-branch, as source (continuation lines absolute)."""
    masks = [f"{kind}={expr}" for kind, expr in f.terms.items()]
    guard = [f"npu_glue.can_fuse({', '.join([f.q, f.k, f.v] + masks + ([f'causal={f.causal[1]}'] if f.causal else []))})"]
    guard += f.guards
    value = f"{f.v}.to({f.q}.dtype)" if f.cast_value else f.v
    args = [f.q, f.k, value, f"{f.q}.shape[1]", '"BNSD"']
    if f.causal:
        args += [f"atten_mask=npu_glue.causal_mask({f.q}.device)", f"sparse_mode={f.causal[0]}"]
    elif masks:
        args.append(f"atten_mask=npu_glue.npu_mask({', '.join([f.q, f.k] + masks)})")
    args.append(f"scale={f.scale or '1.0'}")
    if f.keep_prob:
        args.append(f"keep_prob={f.keep_prob}")
    # continuation lines are relative to the block they end up in (libcst re-indents them)
    cast = f".to({f.v}.dtype)" if f.cast_value else ""
    test = " and ".join(guard)
    if len(f.indent) + len(test) + 4 > WIDTH:
        test = "(\n" + "\n".join(f"{f.unit}{'and ' if i else ''}{g}" for i, g in enumerate(guard)) + "\n)"
    text = (f"if {test}:\n"
            f"{f.unit}{f.out} = {TARGET}(\n{_wrap(args, f.unit * 2, len(f.indent))}\n{f.unit})[0]{cast}\n")
    if f.probs:
        text += f"{f.unit}{f.probs} = None  # not formed by the fused kernel\n"
    return text + f"else:\n{f.unit}pass\n"


class EagerAttention(FunctionRule, Rule):
    code = "NPU302"
    name = "eager-attention"
    summary = "hand-written attention → torch_npu.npu_fusion_attention, guarded, the original kept as fallback"
    triggers = (b"softmax",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._runs: Dict[int, List[Fusion]] = {}  # per block: one fix rewrites all its runs

    def found(self, result) -> None:
        if not isinstance(result, Fusion) or not self.ctx.enabled(self.code):
            return
        how = f"sparse_mode={result.causal[0]} causal mask" if result.causal else (
            "masks converted at run time" if result.terms else "no mask")
        # the finding points at the run's first statement; the block's fix replaces the statements
        self.rewrite(result.block.body[result.start], lambda node: node,
                     f"attention ({result.out} = softmax(QK^T)V, {how}) → {TARGET}, guarded by npu_glue.can_fuse",
                     target=TARGET, api="attention", imports=[ImportSpec("torch_npu")], helpers=["npu_glue"])
        runs = self._runs.setdefault(id(result.block), [])
        if not runs:
            self.ctx.fixes.setdefault(id(result.block), []).append(
                Fix(result.block, lambda block: _apply(block, result.block, runs)))
        runs.append(result)


def _apply(block: cst.IndentedBlock, original: cst.IndentedBlock, runs: List[Fusion]) -> cst.IndentedBlock:
    """The block with each run replaced by its guarded if/else (edits other fixes made kept)."""
    body = list(block.body) if len(block.body) == len(original.body) else list(original.body)
    out, i = [], 0
    for f in sorted(runs, key=lambda r: r.start):
        out.extend(body[i:f.start])
        run = [body[j] for j in range(f.start, f.end + 1) if j not in f.hoisted]
        out.extend(body[j] for j in f.hoisted)
        out.append(_guarded(f, run))
        i = f.end + 1
    return block.with_changes(body=[*out, *body[i:]])


def _guarded(f: Fusion, run: List[cst.BaseStatement]) -> cst.If:
    parsed = cst.parse_module(fused_statements(f)).body[0]
    first = run[0]
    comment = cst.EmptyLine(comment=cst.Comment(
        "# npu-migrate NPU302: fused attention where npu_glue.can_fuse proves it exact, else the original"))
    return parsed.with_changes(
        leading_lines=[*first.leading_lines, comment],
        orelse=cst.Else(body=cst.IndentedBlock([first.with_changes(leading_lines=[]), *run[1:]], indent=f.unit)),
    )
