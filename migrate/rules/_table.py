"""Table-driven rules: a rule that owns some op-table codes acts on every name that resolves to a
record with one of its codes.

Names are handled as whole dotted chains (``torch.cuda.amp.autocast``), outermost chain only, so a
chain is never rewritten twice. A ``rename`` record rewrites the chain (or the import that binds
it); an ``unsupported``/``fallback`` record reports the site with the record's plan.
"""

from __future__ import annotations

from typing import List, Optional, Set, Tuple

import libcst as cst
from libcst.helpers import get_full_name_for_node

from npu_migrate.migrate.rules._syntax import code
from npu_migrate.migrate.rules.base import ImportSpec, Rule
from npu_migrate.opmap import Fallback, OpRecord, OpTable

TORCH_NPU = ImportSpec("torch_npu")
REPORTED = ("unsupported", "fallback")


def plan_of(table: OpTable, api: str, default: str) -> Fallback:
    """The fallback plan of the record ``api`` (a ``pattern.*`` record of a reported form); a manual
    plan saying ``default`` when a user's op table dropped it."""
    record = table.exact(api)
    return record.fallback if record is not None and record.fallback else Fallback("manual", default)


def dotted(node: cst.CSTNode) -> Optional[str]:
    """``a.b.c`` for a pure Name/Attribute chain, else None (``f().x`` is not a name)."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr.value}" if inner else None
    return None


def chain_head(node: cst.CSTNode) -> cst.Name:
    while isinstance(node, cst.Attribute):
        node = node.value
    return node


def covering_record(table: OpTable, qualified: str) -> Tuple[Optional[OpRecord], str]:
    """The record that covers ``qualified`` and the api prefix it matched.

    At each length, from the longest: for the full name its exact record, else ``name.*``; for a
    shorter prefix ``p``, ``p.*`` first (a name below ``p``), else the exact record of ``p`` (an
    attribute of a renamed object keeps its tail: ``torch.cuda.Event.query``).
    """
    parts = qualified.split(".")
    for end in range(len(parts), 0, -1):
        head = ".".join(parts[:end])
        exact, below = table.exact(head), table.exact(head + ".*")
        for record in ((exact, below) if end == len(parts) else (below, exact)):
            if record is not None:
                return record, head
    return None, ""


# CUDA-only libraries that projects re-export from a module of their own (vLLM's
# ``from vllm.triton_utils import tl, triton``): a name below such a component is the library's
REEXPORTED = frozenset({"triton", "helion", "xformers", "flash_attn", "mamba_ssm", "cupy"})


def reroot(qualified: str) -> Optional[str]:
    """``vllm.triton_utils.triton.jit`` → ``triton.jit``: the name from the first re-exported
    library component after the head; None when there is none."""
    parts = qualified.split(".")
    for index in range(1, len(parts)):
        if parts[index] in REEXPORTED:
            return ".".join(parts[index:])
    return None


def renamed(table: OpTable, qualified: str) -> Optional[str]:
    """The NPU name of ``qualified`` when a ``rename`` record covers it, else None."""
    record, api = covering_record(table, qualified)
    if record is None or record.status != "rename":
        return None
    return record.target + qualified[len(api):]


def importable(name: str) -> str:
    """``torch.npu`` exists only as an attribute set by ``import torch_npu``; import statements
    must name the real module ``torch_npu.npu``."""
    if name == "torch.npu" or name.startswith("torch.npu."):
        return "torch_npu.npu" + name[len("torch.npu"):]
    return name


class TableNameRule(Rule):
    """Base of rules that act on op-table records with their own codes (see module docstring)."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._done: Set[int] = set()  # Names/Attributes already handled as part of a chain
        self._import_depth = 0
        self._line: Optional[cst.SimpleStatementLine] = None  # the current one-statement line
        self._torch_npu_added = False  # an ``import torch_npu`` was put before a rewritten from-import

    # -- hooks for subclasses ---------------------------------------------------------------------
    def owns(self, record: OpRecord) -> bool:
        return record.code in self.all_codes()

    def on_record(self, node: cst.CSTNode, qualified: str, record: OpRecord, api: str) -> None:
        """Called once per outermost chain whose record this rule owns."""
        if record.status == "rename":
            self.rename_chain(node, qualified, record)
        elif record.status in REPORTED:
            self.report_record(node, record, qualified, self.describe(record, qualified))

    def describe(self, record: OpRecord, qualified: str) -> str:
        return f"{qualified}: {record.summary}" if record.summary else f"{qualified} has no NPU equivalent"

    # -- names that are not expressions ---------------------------------------------------------
    def _skip(self, *nodes) -> None:
        self._done.update(id(n) for n in nodes if n is not None)

    def visit_Arg(self, node: cst.Arg) -> None:
        self._skip(node.keyword)  # f(synchronize=1) names a parameter, not the import
        call = self.ctx.tree.parents().get(id(node))
        if isinstance(call, cst.Call) and id(call) in self.ctx.names.dynamic and call.args[0] is node:
            self._dynamic_import(call)

    def _dynamic_import(self, call: cst.Call) -> None:
        """``importlib.import_module("torch.cuda")`` bound to a name: the module is renamed, as an
        ``import torch.cuda as tc`` is (``"torch_npu.npu"``)."""
        _, module = self.ctx.names.dynamic[id(call)]
        target = self._owned_rename(module)
        if target is None:
            return
        literal = call.args[0].value
        new = cst.SimpleString(f"{literal.prefix}{literal.quote}{importable(target)}{literal.quote}")
        self.replace(literal, new, f"import of {module} at run time → {importable(target)}",
                     target=importable(target), api=module, code=self._code_of(module))

    # (a def, class, parameter or ``as`` target that shares an imported name is a binding, which
    # the resolver answers through scope analysis, so they need no skipping here)

    def visit_Import(self, node: cst.Import) -> None:
        self._import_depth += 1
        self.on_import(node)

    def leave_Import(self, node: cst.Import) -> None:
        self._import_depth -= 1

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._import_depth += 1
        self.on_import_from(node)

    def leave_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._import_depth -= 1

    # -- chains ---------------------------------------------------------------------------------
    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._skip(node.attr)
        if id(node) in self._done or self._import_depth:
            return
        if dotted(node) is None:
            return
        inner = node.value
        while isinstance(inner, cst.Attribute):
            self._skip(inner, inner.attr)
            inner = inner.value
        self._skip(inner)
        self._chain(node)

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) not in self._done and not self._import_depth:
            self._chain(node)

    def _chain(self, node: cst.CSTNode) -> None:
        if not self.ctx.names.is_imported(chain_head(node).value):
            return
        qualified = self.qualified_name(node) or self._reexported(node)
        if qualified is None:
            return
        record, api = covering_record(self.ctx.table, qualified)
        if record is None and reroot(qualified):
            qualified = reroot(qualified)
            record, api = covering_record(self.ctx.table, qualified)
        if record is not None and self.owns(record):
            self.on_record(node, qualified, record, api)

    def _reexported(self, node: cst.CSTNode) -> Optional[str]:
        """A name that several imports bind to one CUDA-only library (``try: from vllm.triton_utils
        import triton`` / ``except ImportError: import triton``), which the resolver leaves open."""
        head = chain_head(node).value
        roots = {reroot(bound) or bound for bound in self.ctx.names.imports.get(head, ())}
        if len(roots) != 1 or head in self.ctx.names.other_bindings:
            return None
        (root,) = roots
        if root.split(".")[0] not in REEXPORTED:
            return None
        dotted_name = get_full_name_for_node(node)
        return root + dotted_name[len(head):] if dotted_name else None

    def rename_chain(self, node: cst.CSTNode, qualified: str, record: OpRecord) -> None:
        """Rewrite a chain to its renamed target, relative to what its head name is bound to
        (after this rule rewrote the import that binds it, if any)."""
        table = self.ctx.table
        head = chain_head(node)
        bound = self.qualified_name(head)
        new_bound = renamed(table, bound) or bound
        target = renamed(table, qualified)
        if bound is None or target is None or target == new_bound + qualified[len(bound):]:
            return  # the head's import was rewritten and already binds the NPU object
        if not target.startswith(new_bound + "."):
            return
        text = head.value + target[len(new_bound):]
        self.replace(node, cst.parse_expression(text), f"{qualified} → {target}", target=target, api=qualified,
                     code=record.code, imports=[TORCH_NPU])

    # -- imports --------------------------------------------------------------------------------
    def _owned_rename(self, qualified: str) -> Optional[str]:
        record, _ = covering_record(self.ctx.table, qualified)
        if record is None or record.status != "rename" or not self.owns(record):
            return None
        return renamed(self.ctx.table, qualified)

    def _code_of(self, qualified: str) -> str:
        return covering_record(self.ctx.table, qualified)[0].code

    def on_import(self, node: cst.Import) -> None:
        """``import torch.cuda as tc`` → ``import torch_npu.npu as tc`` (plain imports bind
        ``torch`` and need no change)."""
        changed = []
        for alias in node.names:
            qualified = get_full_name_for_node(alias.name)
            target = self._owned_rename(qualified) if alias.asname is not None else None
            if target is not None:
                changed.append((alias, qualified, importable(target)))
        if not changed:
            return
        replace = {id(alias): cst.parse_expression(target) for alias, _, target in changed}
        new = node.with_changes(names=[a.with_changes(name=replace[id(a)]) if id(a) in replace else a for a in node.names])
        alias, qualified, target = changed[0]
        local = alias.asname.name.value
        self.replace(node, new, f"import {qualified} as {local} → import {target} as {local}", target=target,
                     api=qualified, code=self._code_of(qualified))

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._line = node if len(node.body) == 1 else None

    def on_import_from(self, node: cst.ImportFrom) -> None:
        """Rebind imported names to their NPU twins, keeping each local name:
        ``from torch.cuda import CUDAGraph`` → ``from torch_npu.npu import NPUGraph as CUDAGraph``.
        Names that are not renamed stay in the original statement; new statements go on new lines."""
        if node.relative or node.module is None:
            return
        base = get_full_name_for_node(node.module)
        if isinstance(node.names, cst.ImportStar):
            self._star_import(node, base)
            return
        groups: dict = {}  # new module -> [ImportAlias]
        kept: Set[int] = set()  # ids of the aliases that stay
        first = None
        for alias in node.names:
            target = self._owned_rename(f"{base}.{alias.name.value}")
            if target is None:
                kept.add(id(alias))
                continue
            module, _, name = importable(target).rpartition(".")
            local = alias.asname.name.value if alias.asname is not None else alias.name.value
            asname = cst.AsName(cst.Name(local)) if local != name else None
            new_alias = cst.ImportAlias(cst.Name(name), asname)
            groups.setdefault(module, []).append(new_alias)
            if first is None:
                first = (f"{base}.{alias.name.value}", module, code(new_alias))
        if first is None:
            return

        add_torch_npu = (any(not module.startswith("torch_npu") for module in groups)
                         and not self.ctx.names.is_imported("torch_npu") and not self._torch_npu_added)
        self._torch_npu_added |= add_torch_npu

        def statements(updated: cst.ImportFrom) -> List[cst.BaseSmallStatement]:
            result = []
            if kept:
                names = [a for a in updated.names if id(a) in kept]
                names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                parens = {} if len(names) > 1 else {"lpar": None, "rpar": None}
                result.append(updated.with_changes(names=names, **parens))
            if add_torch_npu:
                # the new name (e.g. torch.distributed.is_hccl_available) exists only once torch_npu is imported
                result.append(cst.Import([cst.ImportAlias(cst.Name("torch_npu"))]))
            for module, aliases in groups.items():
                module_node = cst.parse_expression(module)
                if not any(isinstance(r, cst.ImportFrom) for r in result):  # keep the original's formatting
                    result.append(updated.with_changes(module=module_node, names=_with_commas(updated.names, aliases)))
                else:
                    result.append(cst.ImportFrom(module=module_node, names=aliases))
            return result

        line = self._line
        result = statements(node)
        if line is not None and line.body[0] is node:
            lines = [line.with_changes(body=[result[0]])] + [cst.SimpleStatementLine([s]) for s in result[1:]]
            where, new = line, lines[0] if len(lines) == 1 else cst.FlattenSentinel(lines)
        else:
            where, new = node, result[0] if len(result) == 1 else cst.FlattenSentinel(result)
        qualified, module, alias_text = first
        message = f"from {base} import {qualified.rpartition('.')[2]} → from {module} import {alias_text}"
        self.replace(where, new, message, target=f"{module}.{alias_text.split()[0]}", api=qualified,
                     code=self._code_of(qualified))


    def _star_import(self, node: cst.ImportFrom, base: str) -> None:
        """``from torch.cuda import *`` stays, and the names it binds that the file reads and that
        are renamed are bound again, by name, to their NPU twins on the lines after it:
        ``from torch_npu.npu import synchronize``."""
        groups: dict = {}
        first = None
        for local in self.ctx.names.star_names(base):
            target = self._owned_rename(f"{base}.{local}")
            if target is None:
                continue
            module, _, name = importable(target).rpartition(".")
            alias = cst.ImportAlias(cst.Name(name), cst.AsName(cst.Name(local)) if local != name else None)
            groups.setdefault(module, []).append(alias)
            first = first or (f"{base}.{local}", module, code(alias))
        if first is None:
            return
        added: List[cst.BaseSmallStatement] = []
        if any(not module.startswith("torch_npu") for module in groups) \
                and not self.ctx.names.is_imported("torch_npu") and not self._torch_npu_added:
            self._torch_npu_added = True
            added.append(cst.Import([cst.ImportAlias(cst.Name("torch_npu"))]))
        added += [cst.ImportFrom(module=cst.parse_expression(module), names=aliases)
                  for module, aliases in groups.items()]
        line = self._line
        if line is not None and line.body[0] is node:
            where, new = line, cst.FlattenSentinel([line, *(cst.SimpleStatementLine([s]) for s in added)])
        else:
            where, new = node, cst.FlattenSentinel([node, *added])
        qualified, module, alias_text = first
        self.replace(where, new, f"from {base} import * binds {qualified.rpartition('.')[2]} → from {module} import "
                     f"{alias_text}", target=f"{module}.{alias_text.split()[0]}", api=qualified,
                     code=self._code_of(qualified))

def _with_commas(original: List[cst.ImportAlias], aliases: List[cst.ImportAlias]) -> List[cst.ImportAlias]:
    """New aliases that reuse the original commas (and so the original line breaks) where they can."""
    result = []
    for index, alias in enumerate(aliases):
        if index < len(original):
            comma = original[index].comma
            if index == len(aliases) - 1 and index != len(original) - 1:
                comma = cst.MaybeSentinel.DEFAULT
        else:
            comma = cst.MaybeSentinel.DEFAULT
        result.append(alias.with_changes(comma=comma))
    return result
