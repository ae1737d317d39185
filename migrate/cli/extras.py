"""What a command needs beyond the light install, and exactly how to install it when it is missing.

``pip install npu-migrate`` brings the rewriter, the reports and the pre-commit hook; ``migrate
run`` never imports torch. ``migrate parity`` (and the parity run that ends ``migrate demo``) runs
the models, so it needs the ``parity`` extra: torch, whose CPU build comes from PyTorch's CPU wheel
index (PyPI's torch wheel for Linux is the CUDA build, GBs of NVIDIA libraries).
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Optional

DISTRIBUTION = "npu-migrate"
EXTRA = "parity"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_FALLBACK_SPEC = "torch"


def torch_requirement() -> str:
    """The torch requirement of the ``parity`` extra as the installed metadata declares it
    (``torch<2.15,>=2.4``), or plain ``torch`` when the metadata cannot be read."""
    from importlib import metadata  # only when the message is written (its import costs every command)

    try:
        requires = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return TORCH_FALLBACK_SPEC
    for requirement in requires:
        spec, _, marker = requirement.partition(";")
        if spec.strip().startswith("torch") and f'extra == "{EXTRA}"' in marker:
            return spec.strip()
    return TORCH_FALLBACK_SPEC


def missing_torch(what: str) -> Optional[str]:
    """None when torch can be imported; else what to install, for ``what`` ("migrate parity")."""
    try:
        if importlib.util.find_spec("torch") is not None:
            return None
    except (ImportError, ValueError):  # a broken or blocked torch counts as missing
        pass
    python = sys.executable or "python3"
    return (f"{what} runs the models with PyTorch, which this installation does not have (the light install "
            f"of {DISTRIBUTION} leaves it out). Install the {EXTRA!r} extra into this environment, PyTorch's CPU "
            f"build first:\n"
            f"  {python} -m pip install '{torch_requirement()}' --index-url {TORCH_CPU_INDEX}\n"
            f"  {python} -m pip install '{DISTRIBUTION}[{EXTRA}]'\n"
            f"(from a source checkout: {python} -m pip install -e '.[{EXTRA}]'; for a GPU build of torch, leave "
            f"out --index-url)")
