"""The residual pass: no component is left silent.

After the rules, every function is searched (on its dataflow view) for the components the fused
rules exist for: attention, rotary embedding, RMS norm, gated MLP, MoE router. The detectors are
deliberately broader than the rules' matchers (they recognise a component by its core, not by a
form a kernel can take). A detection that no finding of its family covers (a rewrite whose edits
contain it, or a report at its statement or in its function) is reported with the family's report
code, the form that was seen and the family's plan (``opmap/residual.yaml``). So a reader of
report.md can trust that everything not listed was migrated.
"""

from __future__ import annotations

from typing import Callable, Iterable, List, Set

import libcst as cst

from .context import FileContext
from .edits import Guarded, Replace, Site, Splice
from .findings import Finding
from .rules.attention import residual as attention
from .rules.mlp import residual as mlp
from .rules.norm import residual as norm
from .rules.rotary import residual as rotary
from .rules.router import residual as router
from .view.regions import statement_of
from ..opmap import Fallback

#: the families, each declared beside its rules (``rules/<family>/residual.py``), in report order
FAMILIES = (attention.FAMILY, rotary.FAMILY, norm.FAMILY, mlp.FAMILY, router.FAMILY)


# -- coverage -----------------------------------------------------------------------------------
def _edited_spans(site: Site) -> Iterable[cst.CSTNode]:
    for edit in site.edits:
        if isinstance(edit, Replace):
            yield edit.node
        elif isinstance(edit, (Splice, Guarded)):
            yield from edit.block.body[edit.start:edit.end]


def _inside(node: cst.CSTNode, ancestors: Set[int], parents) -> bool:
    while node is not None:
        if id(node) in ancestors:
            return True
        node = parents.get(id(node))
    return False


def check(ctx: FileContext, enabled: Callable[[str], bool]) -> None:
    """Add a report for every detected component no finding of its family covers."""
    families = [f for f in FAMILIES if f.enabled(enabled)]
    if not families or ctx.is_helper:
        return
    parents = ctx.tree.parents()
    functions = ctx.tree.of_type(ctx.module, cst.FunctionDef)
    for family in families:
        sites = [s for s in ctx.sites if s.finding.code in family.codes]
        edited = {id(n) for s in sites for n in _edited_spans(s)}
        anchored = {id(statement_of(s.anchor, parents)) for s in sites} | {id(s.anchor) for s in sites}
        for func in functions:
            if not family.named_in(ctx.tree.names(func.body)):
                continue
            for value in family.detect(ctx.view(func)):
                node = value.node
                if node is None or ctx.migrated(node) or _inside(node, edited, parents):
                    continue
                statement = statement_of(node, parents)
                if id(statement) in anchored or _covered_in_function(sites, func, parents) \
                        or _covered_in_callers(ctx, sites, func, functions, parents):
                    continue
                record = ctx.table.exact(family.record)
                fallback = record.fallback if record is not None else Fallback("manual", "keep the original code")
                message = (f"{record.summary if record else family.name} (form seen: {family.form(value)}): "
                           "not fused, the rule does not read this form")
                ctx.add(Site(statement, Finding(family.report, message, "reported", api=family.record,
                                                fallback=fallback)))
                anchored.add(id(statement))


def _covered_in_callers(ctx: FileContext, sites: List[Site], func: cst.FunctionDef, functions, parents) -> bool:
    """``func`` is a helper (``self._norm``, ``rotate_half``) of a function that holds a finding of the
    family: the rules read helpers in place, at the caller."""
    name = func.name.value
    for caller in functions:
        if caller is func or name not in ctx.tree.names(caller.body):
            continue
        if any(_inside(s.anchor, {id(caller)}, parents) or s.anchor is caller for s in sites):
            return True
    return False


def _covered_in_function(sites: List[Site], func: cst.FunctionDef, parents) -> bool:
    """A reported finding of the family anchored in the same function (one report per function
    covers its detections: the report says what the function's component needs)."""
    return any(s.finding.action != "rewritten" and _inside(s.anchor, {id(func)}, parents) for s in sites)
