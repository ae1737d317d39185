"""NPU205: the NCCL collective backend → HCCL: ``"nccl"`` backend strings (also ``"NCCL"``, in
``"cpu:gloo,cuda:nccl"`` and in comparisons with ``get_backend()``), in configuration objects too
(``TrainingArguments(ddp_backend="nccl")``, ``DDPStrategy(process_group_backend="nccl")``: any
keyword or dict key whose name says "backend"), ``is_nccl_available`` and ``Backend.NCCL``
(op-table renames). Any other ``"nccl"`` string of a torch file (a list of accepted names, a dict
key) is kept and reported."""

import re

from npu_migrate.migrate.diagnostics import DiagnosticCode
from npu_migrate.migrate.rules._literals import LiteralRule
from npu_migrate.migrate.rules._table import TableNameRule

_ONE = r"((cpu|cuda):)?(nccl|NCCL|gloo|mpi|ucc|hccl)"


class NcclBackend(TableNameRule, LiteralRule):
    declarations = (
        DiagnosticCode("NPU205", "nccl-backend",
                       'collective backend "nccl" → "hccl"',
                       rewrites=True, example="nccl_backend"),
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
