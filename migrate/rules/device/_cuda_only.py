"""Device tests that guard CUDA-only code, which the device rewrites must leave as they are.

``x.is_cuda``, ``x.device.type == "cuda"``, ``device_type != "cuda"`` and ``torch.cuda.is_available()``
are all False on an NPU. Rewritten to their NPU forms they become True there, which is right for
ordinary code (``.to(device)``) and wrong where the CUDA side of the test runs CUDA-only code: a
Triton or Helion kernel, a CUDA extension, flash_attn/xformers, CUDA graphs, float8. Such a test is
*kept* (NPU207 reports it) and the NPU takes the other side, as it would without the rewrite.

A test is one of: the test of an ``if``/``elif``/conditional expression/``assert``, or the value of
an assignment, keyword argument or ``return`` that computes a flag. The code it decides about is
both its branches (the CUDA-only code may be on either side: ``if device_type != "cuda": use_fp8 =
False`` disables float8 off CUDA), the statements after an ``if`` whose body leaves the block
(``if not x.is_cuda: return fallback(x)``) or after an ``assert``; for a flag, the flag's name
(``use_triton = x.is_cuda and HAS_TRITON``). Keeping a test too often costs an NPU its fast path
(and is reported); rewriting one too often sends it into CUDA-only code.

CUDA-only evidence there (or in the test): a name covered by a CUDA-only op-table record,
a Triton launch ``kernel[grid](...)``, a call of a function of this file decorated by a CUDA-only
decorator, or an identifier that names such code (``triton``, ``fp8``, ``cuda_graph``, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Set, Tuple

import libcst as cst

from ...context import FileContext
from .._literals import string_value
from ...view.syntax import code
from .._table import covering_record, dotted, reroot
from ..base import Rule
from ...tree import walk

# op-table codes of CUDA-only code: extensions, Triton, flash_attn, xformers, apex, bitsandbytes,
# mamba_ssm, CUDA graphs / inductor Triton, float8, Helion, CuPy & co.
CUDA_ONLY_CODES = frozenset({"NPU104", "NPU105", "NPU106", "NPU107", "NPU108", "NPU109", "NPU113", "NPU114",
                             "NPU115", "NPU116", "NPU119"})
CUDA_GRAPHS = frozenset({"torch.cuda.graph", "torch.cuda.CUDAGraph", "torch.cuda.make_graphed_callables",
                         "torch.cuda.graph_pool_handle"})
HINT = re.compile(r"triton|fp8|float8|cuda_?graph|graphed|flash_?attn|xformers|cutlass|helion|liger|mamba_ssm|"
                  r"causal_conv1d|cuda_kernel|cuda_ext|cupy|bitsandbytes", re.IGNORECASE)
CUDA_STRING = re.compile(r"cuda(:\d+)?")
IS_AVAILABLE = "torch.cuda.is_available"
_LEAVES = (cst.Return, cst.Raise, cst.Continue, cst.Break)
# the node types that hold a test or a flag value, and the field that holds it
_HOLDER_FIELDS = {cst.If: "test", cst.IfExp: "test", cst.Assert: "test", cst.Assign: "value", cst.AnnAssign: "value",
                  cst.Arg: "value", cst.Return: "value"}
_BOUNDARIES = frozenset({cst.SimpleStatementLine, cst.IndentedBlock, cst.Module, cst.FunctionDef, cst.ClassDef,
                         cst.Lambda, cst.Else})


@dataclass
class Guard:
    test: cst.CSTNode  # the expression holding the device atoms
    atoms: Tuple[cst.CSTNode, ...]  # the nodes a device rule would rewrite
    evidence: str  # what on the CUDA side is CUDA-only, as source text


_last: list = [None, None, ()]  # (module, table, guards) of the last file analysed: several rules ask


def cuda_only_guards(ctx: FileContext) -> List[Guard]:
    """Every device test of the file that guards CUDA-only code, in source order (computed once per
    file: the result depends only on the module and the op table)."""
    if _last[0] is ctx.module and _last[1] is ctx.table:
        return list(_last[2])
    guards = _find_guards(ctx)
    _last[:] = [ctx.module, ctx.table, tuple(guards)]
    return guards


def _find_guards(ctx: FileContext) -> List[Guard]:
    """Device tests from their atoms up: a cheap type check per node finds the candidate atoms, and
    only their ancestors are looked at (a walk that asked every node for a test cost ~15% of a run)."""
    finder = _Finder(ctx)
    holders: dict = {}
    for node in ctx.tree.subtree(ctx.module):
        if finder.may_be_atom(node):
            holder = finder.holder(node)
            if holder is not None:
                holders[id(holder)] = holder
    guards = []
    for holder in holders.values():
        for test, kind in finder.tests(holder):
            atoms = finder.atoms(test)
            if atoms:
                evidence = finder.evidence([test, *finder.sides(holder, kind)])
                if evidence:
                    guards.append(Guard(test, tuple(atoms), evidence))
    return guards


class CudaOnlyGuards(Rule):
    """Mixin for the device rules: ``keeps_cuda(node)`` says whether ``node`` (an ``.is_cuda``, a
    ``"cuda"`` string, a ``torch.cuda.is_available`` chain) is a kept device atom."""

    _kept: Optional[Set[int]] = None
    _kept_names: Set[str] = frozenset()

    def keeps_cuda(self, node: cst.CSTNode) -> bool:
        if self._kept is None:
            self._kept, names = set(), set()
            for guard in cuda_only_guards(self.ctx):
                for atom in guard.atoms:
                    self._kept.update(id(n) for n in walk(atom))
                    if isinstance(atom, cst.Name):
                        names.add(atom.value)
            self._kept_names = frozenset(names)
        return id(node) in self._kept

    def kept_names(self) -> Set[str]:
        """Bare names among the kept atoms (``has_gpu`` of ``if has_gpu():``)."""
        self.keeps_cuda(self.ctx.module)
        return self._kept_names


class _Finder:
    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.parents = ctx.tree.parents()
        self._kernels: Optional[Set[str]] = None
        self._available: Optional[Set[str]] = None

    # -- where tests are ----------------------------------------------------------------------------
    def may_be_atom(self, node: cst.CSTNode) -> bool:
        kind = type(node)
        if kind is cst.Attribute:
            return node.attr.value in ("is_cuda", "is_available")
        if kind is cst.SimpleString:
            return "cuda" in node.value
        return kind is cst.Name and node.value in self._availability_names

    @property
    def _availability_names(self) -> Set[str]:
        """Local names bound to ``torch.cuda.is_available`` by a from-import."""
        if self._available is None:
            self._available = {local for local, bound in self.ctx.names.imports.items() if IS_AVAILABLE in bound}
        return self._available

    def holder(self, atom: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The nearest statement or expression around ``atom`` that holds it in its test (or flag
        value); None when the climb reaches a statement boundary first."""
        child, node = atom, self.parents.get(id(atom))
        while node is not None and type(node) not in _BOUNDARIES:
            field = _HOLDER_FIELDS.get(type(node))
            if field is not None and getattr(node, field) is child and any(True for _ in self.tests(node)):
                return node
            child, node = node, self.parents.get(id(node))
        return None

    def tests(self, node: cst.CSTNode) -> Iterable[Tuple[cst.CSTNode, str]]:
        """(test, kind) pairs held by ``node``: kind "branch" (if/ifexp/assert) or "flag"."""
        if isinstance(node, (cst.If, cst.IfExp, cst.Assert)):
            yield node.test, "branch"
        elif isinstance(node, cst.Assign) and any(self._hinted_target(t.target) for t in node.targets):
            yield node.value, "flag"
        elif isinstance(node, cst.AnnAssign) and node.value is not None and self._hinted_target(node.target):
            yield node.value, "flag"
        elif isinstance(node, cst.Arg) and node.keyword is not None and HINT.search(node.keyword.value):
            yield node.value, "flag"
        elif isinstance(node, cst.Return) and node.value is not None:
            function = self._enclosing_function(node)
            if function is not None and HINT.search(function.name.value):
                yield node.value, "flag"

    @staticmethod
    def _hinted_target(target: cst.CSTNode) -> bool:
        name = target.attr.value if isinstance(target, cst.Attribute) else getattr(target, "value", None)
        return isinstance(name, str) and HINT.search(name) is not None

    def _enclosing_function(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        while node is not None and not isinstance(node, cst.FunctionDef):
            node = self.parents.get(id(node))
        return node

    # -- device atoms -------------------------------------------------------------------------------
    def atoms(self, test: cst.CSTNode) -> List[cst.CSTNode]:
        """The device atoms of ``test``, through ``not``/``and``/``or``."""
        found: List[cst.CSTNode] = []
        self._atoms(test, found)
        return found

    def _atoms(self, node: cst.CSTNode, found: list) -> None:
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
            self._atoms(node.expression, found)
        elif isinstance(node, cst.BooleanOperation):
            self._atoms(node.left, found)
            self._atoms(node.right, found)
        elif isinstance(node, cst.Attribute) and node.attr.value == "is_cuda":
            found.append(node)
        elif isinstance(node, cst.Call) and dotted(node.func) and self.ctx.names.qualified_name(node.func) == IS_AVAILABLE:
            found.append(node.func)
        elif isinstance(node, cst.Comparison):
            for target in node.comparisons:
                found.extend(o for o in (node.left, target.comparator) if CUDA_STRING.fullmatch(string_value(o) or ""))
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "startswith":
            found.extend(a.value for a in node.args if (string_value(a.value) or "") == "cuda")

    # -- the code a test decides about ------------------------------------------------------------------
    def sides(self, holder: cst.CSTNode, kind: str) -> Sequence[cst.CSTNode]:
        """Both branches, and the statements after an ``if`` whose body leaves the block (``if not
        x.is_cuda: return fallback(x)``) or after an ``assert``; for a flag, its name."""
        if kind == "flag" or isinstance(holder, cst.IfExp):
            return [holder]
        if isinstance(holder, cst.Assert):
            return self._following(holder)
        sides: List[cst.CSTNode] = [holder.body] + ([holder.orelse] if holder.orelse is not None else [])
        if _leaves(holder.body):
            sides.extend(self._following(holder))
        return sides

    def _following(self, statement: cst.CSTNode) -> List[cst.CSTNode]:
        """The statements after ``statement`` in its block."""
        node = statement
        while node is not None and not isinstance(self.parents.get(id(node)), (cst.IndentedBlock, cst.Module)):
            node = self.parents.get(id(node))
        block = self.parents.get(id(node)) if node is not None else None
        if block is None:
            return []
        body = list(block.body)
        return body[body.index(node) + 1:] if node in body else []

    # -- CUDA-only evidence ----------------------------------------------------------------------------
    def evidence(self, nodes: Sequence[cst.CSTNode]) -> str:
        for root in nodes:
            for node in walk(root):
                found = self._evidence(node)
                if found:
                    return found
        return ""

    def _evidence(self, node: cst.CSTNode) -> str:
        if isinstance(node, (cst.Name, cst.Attribute)) and dotted(node):
            qualified = self.ctx.names.qualified_name(node)
            qualified = (reroot(qualified) or qualified) if qualified is not None else None
            if qualified is not None:
                record, _ = covering_record(self.ctx.table, qualified)
                if qualified in CUDA_GRAPHS or (record is not None and record.code in CUDA_ONLY_CODES
                                                and record.status != "native"):
                    return qualified
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Subscript):
            return f"the Triton launch {code(node.func).strip()}(...)"
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in self.kernels():
            return f"the kernel {node.func.value}"
        ident = node.value if isinstance(node, cst.Name) else node.attr.value if isinstance(node, cst.Attribute) else None
        if isinstance(ident, str) and HINT.search(ident):
            return ident
        if isinstance(node, cst.FunctionDef) and HINT.search(node.name.value):
            return node.name.value
        return ""

    def kernels(self) -> Set[str]:
        """Functions of this file decorated by a CUDA-only decorator (``@triton.jit``, ``@helion.kernel``)."""
        if self._kernels is None:
            self._kernels = set()
            for node in self.ctx.tree.of_type(self.ctx.module, cst.FunctionDef):
                for decorator in node.decorators:
                    target = decorator.decorator
                    target = target.func if isinstance(target, cst.Call) else target
                    qualified = self.ctx.names.qualified_name(target) if dotted(target) else None
                    qualified = (reroot(qualified) or qualified) if qualified else None
                    record = covering_record(self.ctx.table, qualified)[0] if qualified else None
                    if record is not None and record.code in CUDA_ONLY_CODES:
                        self._kernels.add(node.name.value)
        return self._kernels


def _leaves(block: cst.BaseSuite) -> bool:
    """The block ends by leaving its enclosing block (return, raise, continue, break)."""
    body = block.body
    if not body:
        return False
    last = body[-1]
    if isinstance(last, cst.SimpleStatementLine):
        return isinstance(last.body[-1], _LEAVES)
    return isinstance(last, _LEAVES)
