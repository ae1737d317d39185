"""NPU230: torch imported in a way whose names cannot be followed, reported so that nothing the
tool cannot see is silently left on CUDA.

The resolver (``migrate.names``) reads ``from torch import *`` and ``name = __import__("torch")`` /
``importlib.import_module("torch")`` as imports, so the code that uses them is migrated like any
other. What it cannot follow is reported here, once per import:

- a run-time import of a torch module whose value is not bound to a plain name, or to one that is
  also bound some other way: ``__import__("torch").cuda.synchronize()``, ``self.torch =
  importlib.import_module("torch")``;
- a star import of a torch module in a file with several star imports, when the file reads names
  it never binds: which import binds each of them is not known.
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
                       example="hidden_import"),
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
