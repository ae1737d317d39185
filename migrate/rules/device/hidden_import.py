"""NPU230: torch imported in a way whose names cannot be followed (by ``migrate.names``), reported so
that nothing the tool cannot see is silently left on CUDA.

## What it does
Reports an import of torch whose names the tool cannot follow, so the CUDA code that uses them would
otherwise be neither migrated nor reported:

- a run-time import (`__import__("torch")`, `importlib.import_module("torch.cuda")`) whose value is
  not bound to a name of its own: used inline (`__import__("torch").cuda.synchronize()`), kept in an
  attribute (`self.torch = importlib.import_module("torch")`), or bound to a name that is also bound
  some other way;
- `from torch... import *` in a file with several star imports, when the file reads names it never
  binds: which import binds each of them is not known.

The forms that can be followed are migrated like any import: `from torch import *` alone (the names
the file reads but never binds are resolved through it; renamed ones are bound again by name after
it, `from torch_npu.npu import synchronize`), and `name = __import__("torch")` / `name =
importlib.import_module("torch.cuda")` on a line of their own (the module string is renamed like an
`import ... as name`: `"torch_npu.npu"`).

## Why
The device rewrites and the reports of this tool follow names to their imports. A name that arrives
some other way is invisible to them: without this report, `__import__("torch").cuda` would stay on
CUDA and nothing would say so.

## Fix safety
Nothing is rewritten. Import the names by name (`import torch`, `from torch import cuda`, or
`torch = importlib.import_module("torch")` on a line of its own) and run migrate again.

## Known problems
A run-time import whose module name is not a literal (`importlib.import_module(name)`) cannot be
told apart from any other import and is not reported.
"""

import libcst as cst
from libcst.helpers import get_full_name_for_node

from ...diagnostics import DiagnosticCode
from .._scope import TORCH_LIBRARIES
from .._table import plan_of
from ..base import Rule

RECORD = "pattern.import.hidden"


def _torch(module: str) -> bool:
    return module.split(".")[0] in TORCH_LIBRARIES


class HiddenImport(Rule):
    declarations = (
        DiagnosticCode("NPU230", "hidden-torch-import",
                       "torch imported in a way its names cannot be followed (star or run-time import); reported",
                       example="hidden_import", doc=__doc__),
    )
    triggers = (b"__import__", b"import_module", b"import *")

    @classmethod
    def may_find(cls, words) -> bool:
        """A run-time import names its function (``NameResolver.dynamic_import``); a star import of torch."""
        return bool(words.names & {"__import__", "import_module"}) or any(_torch(m) for m in words.star_modules)

    def visit_Call(self, node: cst.Call) -> None:
        names = self.ctx.names
        module = names.dynamic_import(node)
        if module is None or not _torch(module):
            return
        local, _ = names.dynamic.get(id(node), (None, None))
        if local is not None and names.qualified_import(local) is not None:
            return  # a plain binding: its uses are migrated like an import's
        self._report(node, module, f"{module} is imported at run time ({get_full_name_for_node(node.func)}(...)) and "
                     "its value is not bound to a name that nothing else binds, so its uses cannot be followed")

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        names = self.ctx.names
        if not isinstance(node.names, cst.ImportStar) or node.relative or node.module is None:
            return
        module = get_full_name_for_node(node.module)
        if _torch(module) and names.ambiguous_star:
            self._report(node, module, f"from {module} import * is one of {len(names.star_modules)} star imports of "
                         "this file, so the names it reads without binding them cannot be traced to one of them")

    def _report(self, node: cst.CSTNode, module: str, why: str) -> None:
        self.report(node, f"{why}: CUDA code reached through it is neither migrated nor checked", api=module,
                    fallback=plan_of(self.ctx.table, RECORD, "Import the torch names by name and run migrate again."))
