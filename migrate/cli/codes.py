"""``--select``/``--ignore``: comma-separated codes or prefixes, each checked against the known codes.

A typo must not turn a CI gate off (``--select NPU3O2`` would select nothing and ``--check`` would
pass), so a code or prefix that matches no known code is a usage error (exit 2) naming it.
"""

from __future__ import annotations

from typing import List, Optional

import typer

FUSED_PREFIX = "NPU3"  # every fused-kernel rewrite (``--no-fused``)


def parse_codes(value: Optional[str]) -> List[str]:
    return [c.strip().upper() for c in (value or "").split(",") if c.strip()]


def unknown(patterns: List[str], known: List[str]) -> List[str]:
    """The patterns (codes or prefixes) that match no known code."""
    return [p for p in patterns if not any(code.startswith(p) for code in known)]


def known_code(pattern: str) -> bool:
    """Whether a code or prefix matches a known code (for [tool.npu-migrate]'s lists)."""
    from ..outputs.codes import catalogue

    return not unknown([pattern], list(catalogue()))


def check_codes(ctx: typer.Context, param: typer.CallbackParam, value: Optional[str]) -> Optional[List[str]]:
    """The option's codes, or a usage error naming those that match no known code."""
    codes = parse_codes(value)
    if not codes or ctx.resilient_parsing:
        return codes or None
    from ..outputs.codes import catalogue

    bad = unknown(codes, list(catalogue()))
    if bad:
        plural = "s" if len(bad) > 1 else ""
        raise typer.BadParameter(f"unknown diagnostic code{plural} {', '.join(map(repr, bad))} "
                                 "(`migrate explain` lists the codes; prefixes such as NPU2 must match one)")
    return codes
