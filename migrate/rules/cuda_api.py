"""NPU201: ``torch.cuda.*`` → ``torch.npu.*``, as ``transfer_to_npu`` swaps the module at run time.

Attribute chains are rewritten (``torch.cuda.amp.autocast`` → ``torch.npu.amp.autocast``, once, as a
whole); imports are rebound keeping the user's local names (``from torch import cuda`` →
``from torch_npu import npu as cuda``). Names without a public twin are reported.
"""

from npu_migrate.migrate.rules._table import TableNameRule


class CudaApi(TableNameRule):
    code = "NPU201"
    name = "cuda-api"
    summary = "torch.cuda API → torch.npu (reported when torch_npu has no twin)"
    triggers = (b"cuda",)
