"""CUDA-only code in real packages: is every use reported? (issue 8 item 3, the CUDA-only half)

    python benchmarks/cuda_only_sites.py DIR [DIR ...] [--jobs N] [--show N]

Each DIR (an installed package, or sources unpacked from a wheel, never copied into this repo) is
migrated in memory with every rule. Independently of the rules, a line scanner marks the lines that
use CUDA-only code: imports of CUDA-only libraries (triton, xformers, flash_attn, mamba_ssm,
causal_conv1d, helion, cupy, pycuda, apex, amp_C, bitsandbytes, liger_kernel), float8/float4 dtypes,
scaled/grouped/int4 matmuls, FlexAttention, CUDA graphs (torch.cuda.graph / CUDAGraph /
make_graphed_callables and torch.compile's cudagraph modes), inductor's Triton config, custom
``torch.ops`` namespaces, ``@triton.jit``/``@helion.kernel`` and ``cpp_extension``. A marked line is
*found* when the run has a finding on that line, *silent* otherwise. Lines inside a function whose
decorator was reported (a Triton kernel body) count as found: the kernel is one site. Comment lines
and strings are blanked out before scanning; a library counts as found in a file once it is reported
there (at its first import); silent lines are printed for review.

Prints per DIR: Python files, files with CUDA-only lines, marked lines, found, silent, and the
number of findings per CUDA-only code; then the first ``--show`` silent lines.
"""

from __future__ import annotations

import argparse
import io
import re
import tokenize
import sys
from collections import Counter
from pathlib import Path
from typing import Dict, List, Set, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npu_migrate.migrate.discovery import discover  # noqa: E402
from npu_migrate.migrate.runner import run  # noqa: E402
from npu_migrate.opmap import load_table  # noqa: E402

LIBRARIES = r"triton|xformers|flash_attn|mamba_ssm|causal_conv1d|helion|cupy|pycuda|apex|amp_C|bitsandbytes|liger_kernel"
MARKERS = re.compile("|".join([
    rf"^\s*(from|import)\s+({LIBRARIES})\b",
    r"\btorch\.(float8_e\w+|float4_e\w+|_scaled_mm|_scaled_grouped_mm|_grouped_mm|_weight_int4pack_mm|"
    r"_weight_int8pack_mm|_convert_weight_to_int4pack)\b",
    r"\btorch\.nn\.attention\.flex_attention\b|\bcreate_block_mask\b",
    r"\btorch\.cuda\.(graph|CUDAGraph|make_graphed_callables)\b",
    r"""mode\s*=\s*["'](reduce-overhead|max-autotune)["']""",
    r"_inductor\.config\.triton\b",
    r"\btorch\.ops\.(?!aten\b|prims\b|npu\b|higher_order\b|quantized\b|_c10d_functional\b|c10d_functional\b|"
    r"_dtensor\b|profiler\b)\w+",
    r"@(triton|helion)\.",
    r"\bcpp_extension\b",
]))
CUDA_ONLY_CODES = {"NPU104", "NPU105", "NPU106", "NPU107", "NPU108", "NPU109", "NPU113", "NPU114", "NPU115",
                   "NPU116", "NPU117", "NPU118", "NPU119", "NPU206", "NPU207", "NPU208"}
IMPORT = re.compile(rf"^\s*(from|import)\s+({LIBRARIES})\b")
DECORATED = re.compile(r"^(\s*)@(triton|helion)\.|^(\s*)@(\w+\.)*(jit|autotune|heuristics|kernel)\b")


def code_lines(text: str) -> Tuple[List[str], List[int]]:
    """The lines of ``text`` with strings and comments blanked out (docstrings mention kernels too),
    and for each line the first line of its statement (a finding sits on a statement's first line)."""
    lines = text.splitlines()
    blank = [list(line) for line in lines]
    starts = list(range(1, len(lines) + 1))
    try:
        first = None
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.STRING, tokenize.COMMENT) or token.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
                (row, col), (end_row, end_col) = token.start, token.end
                for r in range(row, end_row + 1):
                    line = blank[r - 1]
                    start = col if r == row else 0
                    stop = end_col if r == end_row else len(line)
                    line[start:stop] = " " * (stop - start)
            if token.type in (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
                if token.type == tokenize.NEWLINE:
                    first = None
                continue
            if first is None:
                first = token.start[0]
            for row in range(token.start[0], min(token.end[0], len(lines)) + 1):
                starts[row - 1] = first
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return ["".join(line) for line in blank], starts


def marked_lines(text: str) -> List[Tuple[int, int, str, str]]:
    """(line number, first line of its statement, text, library) of the lines the scanner marks
    (library: the CUDA-only library
    an import line imports, else ""); lines of decorated kernel bodies get a negative number (they
    are covered by the decorator's finding)."""
    marked = []
    body_indent = None  # inside a decorated function: the indentation of its decorators and ``def``
    seen_def = False
    codes, starts = code_lines(text)
    for number, (line, code) in enumerate(zip(text.splitlines(), codes), 1):
        stripped = code.lstrip()
        indent = len(code) - len(stripped)
        if body_indent is not None and stripped and indent <= body_indent and seen_def and not stripped.startswith(")"):
            body_indent, seen_def = None, False  # the next statement after the decorated function
        inside = body_indent is not None  # a later decorator of the stack, the def or the body
        if DECORATED.match(code) and body_indent is None:
            body_indent = indent
        if body_indent is not None and indent == body_indent and stripped.startswith(("def ", "async def ")):
            seen_def = True
        if stripped and MARKERS.search(code):
            library = IMPORT.match(code)
            marked.append((-number if inside else number, starts[number - 1], line.strip(),
                           library.group(2) if library else ""))
    return marked


def measure(root: Path, table, jobs: int):
    files = discover(root)
    result = run(root, files.python, table, jobs=jobs)
    found_lines: Dict[str, Set[int]] = {}
    found_apis: Dict[str, Set[str]] = {}  # per file: the top names of the APIs of its findings
    for finding in result.findings:
        found_lines.setdefault(finding.path, set()).add(finding.line)
        found_apis.setdefault(finding.path, set()).add((finding.api or "").split(".")[0])
    counts = Counter(f.code for f in result.findings if f.code in CUDA_ONLY_CODES)
    marked = found = 0
    with_cuda: Set[str] = set()
    silent: List[str] = []
    for path in files.python:
        try:
            text = (root / path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for number, start, line, library in marked_lines(text):
            marked += 1
            with_cuda.add(path)
            # a library is reported at its first import in a file: later imports of it are covered
            lines = found_lines.get(path, set())
            if number < 0 or any(n in lines for n in range(start, abs(number) + 1)) or library in found_apis.get(path, ()):
                found += 1
            else:
                silent.append(f"{path}:{number}: {line[:100]}")
    return len(files.python), len(with_cuda), marked, found, silent, counts, result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--show", type=int, default=20)
    args = parser.parse_args(argv)
    table = load_table()
    print(f"{'package':<28} {'files':>6} {'cuda files':>10} {'marked':>7} {'found':>6} {'silent':>7}  findings by code")
    all_silent = []
    for root in args.dirs:
        python, with_cuda, marked, found, silent, counts, result = measure(root.resolve(), table, args.jobs)
        by_code = ", ".join(f"{code} {n}" for code, n in sorted(counts.items()))
        errors = len(result.errors)
        print(f"{root.name:<28} {python:>6} {with_cuda:>10} {marked:>7} {found:>6} {len(silent):>7}  {by_code}"
              + (f"  ({errors} files with errors)" if errors else ""))
        all_silent.extend(f"{root.name}/{line}" for line in silent)
    for line in all_silent[:args.show]:
        print("  silent:", line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
