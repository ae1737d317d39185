"""NPU205: the NCCL collective backend → HCCL, in strings, configuration objects and op-table renames.

## What it does
Rewrites NCCL backend strings to HCCL (`"nccl"` → `"hccl"`, `"NCCL"` → `"HCCL"`,
`"cpu:gloo,cuda:nccl"` → `"cpu:gloo,npu:hccl"`) in `backend=` arguments, in any keyword argument or
dict key whose name says "backend" (configuration objects: `TrainingArguments(ddp_backend="nccl")`,
`DDPStrategy(process_group_backend="nccl")`, `{"dist_backend": "nccl"}`), the first argument of
`init_process_group`, comparisons with `get_backend()` or `backend` variables, backend assignments
and ternaries; renames `torch.distributed.is_nccl_available` → `is_hccl_available` and
`Backend.NCCL` → `Backend.HCCL`; reports `ProcessGroupNCCL` and `torch.cuda.nccl`, and keeps and
reports any other whole `"nccl"` string of a torch file (a list of accepted backends, a dict key),
which the vendor's static tool would rewrite.

## Why
HCCL is the NPU's collective library; `transfer_to_npu` replaces the backend at run time but, as its
documentation says, code that compares backend strings must be edited by hand — this rule edits it.

## Fix safety
Safe. A from-import of a renamed name keeps its local name and is preceded by `import torch_npu`,
which creates `is_hccl_available`.

Only files that use torch are rewritten: a file that imports torch (or a library built on it), or
imports from its own package, is; a file that imports another GPU array library (CuPy, Numba, JAX,
...) and not torch is left alone; any other file gets the site reported ("... not made: this file
imports neither torch nor its own package"), never rewritten.

## Known problems
Backend names read from the environment or from YAML/JSON config files are not changed (those files
are not Python).
"""

import re

from ...diagnostics import DiagnosticCode
from .._literals import LiteralRule
from .._table import TableNameRule

_ONE = r"((cpu|cuda):)?(nccl|NCCL|gloo|mpi|ucc|hccl)"


class NcclBackend(TableNameRule, LiteralRule):
    declarations = (
        DiagnosticCode("NPU205", "nccl-backend",
                       'collective backend "nccl" → "hccl"',
                       rewrites=True, example="nccl_backend", doc=__doc__),
    )
    triggers = (b"nccl", b"NCCL")

    pattern = re.compile(rf"(?=.*(nccl|NCCL)){_ONE}(,{_ONE})*")
    kin = re.compile(rf"{_ONE}(,{_ONE})*")
    words = {"nccl": "hccl", "NCCL": "HCCL", "cuda": "npu"}
    keywords = frozenset({"backend"})
    keyword_hint = re.compile(r"backend")
    unplaced = "pattern.backend.unplaced_string"
    unplaced_what = "collective backend"
    first_arg_of = frozenset({"torch.distributed.init_process_group", "torch.distributed.Backend"})
    hint = re.compile(r"backend")
