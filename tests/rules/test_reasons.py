"""A reported reason names only what its input shows.

For every finding of the fused-rule fixtures ``fixtures/rules/NPU3x1_*`` and ``NPU3x3_*`` (read from
their ``diagnostics.txt``, which tests/rules/test_rule_fixtures.py holds equal to what the rules
report), in the part of the input the finding is about (the top-level class or function holding its
line, plus the file's imports; comments and docstrings left out):

- every backticked snippet of the message occurs there, modulo whitespace;
- every construct word of ``CONSTRUCTS`` the message uses (einsum, ALiBi, head mask, top-k, ...)
  has one of its source forms there.

What a message says the kernel does (``npu_…`` and ``torch_npu`` names) and what it says the input
lacks (``NEGATIONS``: "no eps is added", "not softmax or sigmoid") are not claims about the input's
constructs: tokens cannot prove an absence. The concept's own definition that opens a residual
finding ("attention (softmax over q·kᵀ scores, multiplied by V) in a form no rule reads") is not
either; its "(form seen: …)" is.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path
from typing import List, Tuple

import pytest

FIXTURES = Path(__file__).parents[2] / "fixtures" / "rules"
CASES = sorted(p for p in FIXTURES.iterdir() if re.match(r"NPU3\d[13]_", p.name))

# (what the reason says, a source form the input must show for it), most specific first: a phrase
# that matches is consumed, so "head mask" is not also read as "mask".
CONSTRUCTS: List[Tuple[str, str]] = [
    (r"head mask", r"head_mask"),
    (r"biased or masked", r"(?i)bias|mask"),
    (r"linear projections with biases", r"linear\((?:[^()]*,){2}[^()]*\)"),  # F.linear's third argument
    (r"einsum/matmul", r"einsum|matmul|@"),
    (r"\bALiBi\b", r"(?i)alibi|slopes"),
    (r"position bias", r"position_bias|pos_bias|rel_pos|relative_position"),
    (r"\bbias(es|ed)?\b", r"(?i)bias|alibi"),
    (r"\bcausal\b", r"(?i)causal|tril|triu"),
    (r"\bmask(s|ed)?\b", r"(?i)mask|tril|triu|-inf|finfo"),
    (r"\beinsum\b", r"\beinsum\b"),
    (r"\bbaddbmm\b", r"\bbaddbmm\b"),
    (r"\bbeta=0\b", r"beta\s*=\s*0(\.0*)?\b"),
    (r"heads merged into the batch|3-D products", r"bmm"),  # bmm or baddbmm: batched 3-D products
    (r"soft-capping|\btanh\b", r"\btanh\b"),
    (r"\bsinks?\b", r"(?i)sink"),
    (r"\bconcatenated\b", r"\bcat\(|concat"),
    (r"\bdropout\b", r"(?i)dropout"),
    (r"\bsigmoid\b", r"sigmoid"),
    (r"(?i)\bsoftmax\b", r"(?i)softmax"),
    (r"\btop-?k\b", r"topk"),
    (r"\bgathered\b", r"gather"),
    (r"scaled_dot_product_attention|\bSDPA\b", r"scaled_dot_product_attention"),
    (r"set in __init__", r"def __init__"),
    (r"(?i)\bReLU\b", r"(?i)relu"),
    (r"(?i)\bGE(LU|GLU)\b", r"(?i)gelu"),
    (r"(?i)\b(SiLU|SwiGLU)\b", r"(?i)silu|swish"),
    (r"\bclamped\b", r"clamp|clip"),
    (r"second half", r"chunk|split|unbind|::2"),
    (r"half rotation", r"rotate_half|cat\(\s*[(\[]\s*-"),
    (r"complex-number", r"view_as_complex|polar|complex"),
    (r"defined in another module", r"import[^\n]*rotat"),  # the rotation it calls is imported
    (r"\bfloat32\b", r"float32|\.float\(\)|torch\.float\b"),
    (r"cast to a dtype", r"\.to\(|\.type\(|type_as|\.float\(|\.half\(|\.bfloat16\("),
    (r"mean is subtracted", r"-\s*[\w.]*mean\("),
    (r"dims other than the last", r"mean\(\s*(dim\s*=\s*)?(\(|\d|-[2-9])"),
    (r"not over the experts' \(last\) dim", r"dim\s*=\s*(\d|-[2-9])"),
    (r"\bmean\b", r"mean\("),
    (r"not straight-line code|inside a branch or loop", r"\b(if|for|while|with)\b|\w_\("),
]

# what the input lacks or the kernel needs: consumed without a requirement
NEGATIONS = [
    r"\bno eps is added[^;:]*", r"\bnever cast back", r"\bno bias\b", r"\bnot RMSNorm\b",
    r"\bnot softmax or sigmoid\b", r"\bno softmax or sigmoid computes\b", r"\bnot renormalised\b",
    r"\bnot (of the form|proven to be)[^;:]*",
    r"the gating kernels choose from [^)]*",  # what the kernels compute, not what the input shows
    r"does not take \([^)]*\)",  # the layouts a kernel takes
    r"(torch_npu\.)?\bnpu_\w+", r"\btorch_npu\b",
]

# (fixture, "line:col") -> why the reason is wrong; another session fixes the reason, never this table
WRONG_REASONS = {}


def code_only(source: str) -> str:
    """``source`` with its comments and docstrings blanked (lines kept)."""
    lines = source.splitlines(keepends=True)
    blank = []
    previous = tokenize.NEWLINE
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT or (
                token.type == tokenize.STRING and previous in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)):
            blank.append((token.start, token.end))
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            previous = token.type
    for (first, col), (last, end) in reversed(blank):
        for row in range(first, last + 1):
            text = lines[row - 1]
            start = col if row == first else 0
            stop = end if row == last else len(text.rstrip("\n"))
            lines[row - 1] = text[:start] + " " * (stop - start) + text[stop:]
    return "".join(lines)


def _tokens(code: str) -> List[str]:
    """The tokens of ``code``: a snippet occurs modulo whitespace when its tokens follow each other there."""
    skip = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT, tokenize.ENDMARKER)
    try:
        return [t.string for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type not in skip]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return code.split()


def scope(source: str, line: int) -> str:
    """The code a finding at ``line`` is about: its top-level definition and the file's imports."""
    code = code_only(source).splitlines()
    parts = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno <= line <= node.end_lineno:
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            parts.append("\n".join(code[first - 1:node.end_lineno]))
    return "\n".join(parts)


def untrue(message: str, code: str) -> List[str]:
    """What ``message`` names that ``code`` does not show (empty when every claim is there)."""
    wrong = []
    tokens = " ".join(_tokens(code))
    for snippet in re.findall(r"`([^`]+)`", message):
        if f" {' '.join(_tokens(snippet))} " not in f" {tokens} ":
            wrong.append(f"`{snippet}` is not in the input")
    text = re.sub(r"`[^`]+`", "`…`", message)
    if " in a form no rule reads" in text:
        text = text[text.index("(form seen:"):]  # the concept's definition before it is no claim
    for negation in NEGATIONS:
        text = re.sub(negation, " ", text)
    for said, shown in CONSTRUCTS:
        for match in list(re.finditer(said, text)):
            if not re.search(shown, code):
                wrong.append(f"says {match.group(0)!r} but the input has no {shown!r}")
        text = re.sub(said, " ", text)
    return wrong


def _findings():
    for case in CASES:
        source = (case / "input.py").read_text()
        for entry in (case / "diagnostics.txt").read_text().splitlines():
            if entry.strip():
                where, code, message = entry.split(" ", 2)
                marks = [pytest.mark.xfail(reason=WRONG_REASONS[case.name, where], strict=True)] \
                    if (case.name, where) in WRONG_REASONS else []
                yield pytest.param(source, int(where.split(":")[0]), message, id=f"{case.name}:{where}", marks=marks)


FINDINGS = list(_findings())


@pytest.mark.parametrize("source,line,message", FINDINGS)
def test_reason_names_only_what_the_input_shows(source, line, message):
    assert untrue(message, scope(source, line)) == []


def test_every_reported_code_has_fixture_findings():
    codes = {case.name.split("_")[0] for case in CASES if (case / "diagnostics.txt").read_text().strip()}
    assert {"NPU303", "NPU311", "NPU321", "NPU331", "NPU341"} <= codes
    assert len(FINDINGS) >= 30


ATTENTION = '''
import torch
from .rope import rotate_half


def causal(q, k, v, mask):
    """ALiBi and a head mask, said in a docstring only."""
    s = torch.matmul(q, k.transpose(-1, -2))  # soft-capping with tanh would go here
    s = s.masked_fill(mask, float("-inf"))
    return torch.matmul(s.softmax(-1), v)


def capped(q, k, v):
    s = torch.tanh(q @ k.mT / 30.0) * 30.0
    return s.softmax(-1) @ v
'''


@pytest.mark.parametrize("message,wrong", [
    ("attention not fused: ALiBi-style scores (baddbmm of a bias with Q and K^T)", 3),  # ALiBi, baddbmm, bias
    ("attention not fused: a position bias (position_bias) is added to the scores", 1),
    ("attention not fused: logit soft-capping (tanh(x / cap) * cap) before the softmax has no fused form", 2),
    ("attention not fused: the attention probabilities are multiplied by a head mask", 1),
    ("attention not fused: attention scores from einsum in a form not proven to be q @ kᵀ", 1),
    ("attention not fused: the probabilities `p` are used after the product with V", 1),
    ("attention not fused: `torch.matmul(q, k.transpose(-1, -2))` under a mask", 0),
    ("attention not fused: `torch.matmul(q,k.transpose(-1,-2))` then a softmax over masked scores", 0),
    ("rotary embedding `torch.matmul(s.softmax(-1), v)` is not rewritten: its rotation is a function defined in "
     "another module", 0),
    ("attention not fused: 5-D, a rank npu_fusion_attention does not take (3-D with the heads merged into the "
     "batch)", 0),
    ("attention not fused: the probabilities are returned", 0),
])
def test_a_claim_the_input_does_not_show_fails(message, wrong):
    """The check itself: claims about the first function (a 0/-inf mask, no ALiBi, no bias, no tanh,
    no head mask and no einsum outside its docstring and comments) fail, true ones pass."""
    found = untrue(message, scope(ATTENTION, 9))
    assert len(found) == wrong, found


ROTARY = '''
import torch


def _rotate_half(x, interleaved):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply(t, cos, sin, interleaved=False):
    return (t * cos) + (_rotate_half(t, interleaved) * sin)
'''


def test_a_rotation_in_the_same_file_is_not_in_another_module():
    """megatron's rope_utils: ``_rotate_half`` is defined beside its caller, nothing named so is imported."""
    message = ("rotary embedding `(t * cos) + (_rotate_half(t, interleaved) * sin)` is not rewritten: its rotation "
               "is a function defined in another module, which this file does not show")
    found = untrue(message, scope(ROTARY, 11))
    assert len(found) == 1 and "defined in another module" in found[0], found


def test_the_scope_is_the_finding_s_definition_and_the_imports():
    first, second = scope(ATTENTION, 9), scope(ATTENTION, 14)
    assert "rotate_half" in first and "rotate_half" in second
    assert "tanh" not in first and "tanh" in second
    assert "ALiBi" not in first  # a docstring is no construct
    assert untrue("logit soft-capping (tanh(x / cap) * cap)", second) == []
