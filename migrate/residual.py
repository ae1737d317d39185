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

from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, Iterable, List, Optional, Set

import libcst as cst

from npu_migrate.migrate.context import FileContext
from npu_migrate.migrate.edits import Guarded, Replace, Site, Splice
from npu_migrate.migrate.findings import Finding
from npu_migrate.migrate.rules._attention_match import has_transposed_product, is_scores
from npu_migrate.migrate.rules._regions import statement_of
from npu_migrate.migrate.rules._rotary_match import may_rotate
from npu_migrate.migrate.rules._view import Value, View
from npu_migrate.migrate.tree import walk
from npu_migrate.migrate.triage import computes
from npu_migrate.opmap import Fallback

PROJECTIONS = ("linear", "matmul", "call", "item", "getitem")
ACTIVATIONS = ("silu", "gelu", "act")


@dataclass(frozen=True)
class Family:
    name: str
    codes: FrozenSet[str]  # a finding with one of these codes covers a detection
    report: str  # the code a residual finding gets
    record: str  # its op-table record (summary and plan)
    words: FrozenSet[str]  # the function must name one of these for the detector to run
    detect: Callable[[View], List[Value]]
    form: Callable[[Value], str]
    # triage: whether a function (``triage.Function``, with the ones it calls) of a module (its ``Words``) may hold the core
    computes: Optional[Callable[[object, object], bool]] = None

    def may_find(self, words) -> bool:
        """Triage (``migrate.triage``): whether a module with these words can hold a detection."""
        return any(self.words & f.names and (self.computes is None or self.computes(words, words.reach(f)))
                   for f in words.functions)


# -- detectors: the core of each component, in any form ---------------------------------------------
def _peel(value: Optional[Value], ops=("cast", "same")) -> Optional[Value]:
    while value is not None and value.op in ops:
        value = value.input
    return value


def _attention(view: View) -> List[Value]:
    found = []
    for value in _values(view, "softmax"):
        scores = _peel(value.input, ("cast", "same", "reshape"))
        if scores is not None and (scores.op == "einsum" or (is_scores(scores) and has_transposed_product(scores))):
            if _feeds_product(view, value):
                found.append(value)
    return found + _attribute_softmax(view)


def _attribute_softmax(view: View) -> List[Value]:
    """Calls ``self.<attr>(scores)`` where the class's ``__init__`` assigns ``self.<attr>`` (in any
    branch) an expression naming a softmax, ``functools.partial(F.softmax, dim=-1)`` say: the
    normalisation is chosen at construction (x-transformers' ``Attend``)."""
    cls = view.scope.cls
    if cls is None:
        return []
    found = []
    for value in _values(view, "call"):
        callee = value["callee"]
        if callee is None or callee.op != "attr" or callee.input is None or callee.input.op != "param" \
                or callee.input.name != "self" or not _assigns_softmax(cls, callee.name):
            continue
        scores = value["arg0"]
        if scores is not None and (_reaches(scores, "einsum") or has_transposed_product(scores, 16)) \
                and _feeds_product(view, value):
            found.append(value)
    return found


def _reaches(value: Value, op: str, depth: int = 16) -> bool:
    """Whether ``op`` computes part of ``value`` (through masks, scales and branches: ``phi``)."""
    stack, seen = [(value, 0)], set()
    while stack:
        current, level = stack.pop()
        if current is None or id(current) in seen or level > depth:
            continue
        seen.add(id(current))
        if current.op == op:
            return True
        stack.extend((child, level + 1) for child in current.kw.values())
    return False


def _assigns_softmax(cls: cst.ClassDef, attribute: str) -> bool:
    for init in (s for s in getattr(cls.body, "body", ()) if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"):
        for node in walk(init):
            if isinstance(node, cst.Assign) and any(
                    isinstance(t.target, cst.Attribute) and isinstance(t.target.value, cst.Name)
                    and t.target.value.value == "self" and t.target.attr.value == attribute for t in node.targets):
                if any(isinstance(n, cst.Name) and "softmax" in n.value.lower() for n in walk(node.value)):
                    return True
    return False


def _feeds_product(view: View, softmax: Value) -> bool:
    for value in view.values.values():
        if value.op in ("matmul", "einsum", "call", "mul"):
            for operand in [*value.kw.values(), *(i for v in value.kw.values() for i in v.items)]:
                if _peel(operand, ("cast", "same", "dropout", "getitem")) is softmax:
                    return True
    return False


def _is_rotation(value: Optional[Value]) -> bool:
    """``cat((-x2, x1))``, ``stack((-x_odd, x_even))``, a call of a rotate helper that was not inlined."""
    value = _peel(value, ("cast", "same", "reshape", "flatten"))
    if value is None:
        return False
    if value.op in ("cat", "stack"):
        items = value["tensors"].items if value["tensors"] is not None else ()
        return any(item.op == "neg" for item in items)
    return value.op == "call" and "rot" in (_callee_name(value) or "").lower()


def _callee_name(value: Value) -> Optional[str]:
    callee = value["callee"]
    return callee.name if callee is not None else value.name


def _factors(product: Value, depth: int = 4) -> List[Value]:
    """The factors of a product of products (``x * cos * scale``)."""
    found = []
    for side in (product.input, product["other"]):
        side = _peel(side)
        if side is not None and side.op == "mul" and depth > 0:
            found += _factors(side, depth - 1)
        elif side is not None:
            found.append(side)
    return found


def _rotary(view: View) -> List[Value]:
    found = []
    for value in _values(view, "add", "sub"):
        products = [_peel(value.input), _peel(value["other"])]
        if all(p is not None and p.op == "mul" for p in products):
            factors = [f for p in products for f in _factors(p)]
            if any(_is_rotation(f) for f in factors):
                found.append(value)
    for value in _values(view, "mul"):
        if any(_peel(side) is not None and _peel(side).op == "view_as_complex" for side in (value.input, value["other"])):
            found.append(value)
    for value in _values(view, "stack"):  # pairs rotated by hand: stack([x0*c - x1*s, x1*c + x0*s])
        items = value["tensors"].items if value["tensors"] is not None else ()
        if len(items) == 2 and {i.op for i in items} == {"add", "sub"} and all(
                _peel(i.input) is not None and _peel(i.input).op == "mul" for i in items):
            found.append(value)
    return found


def _mean_of_square(value: Optional[Value]) -> bool:
    value = _peel(value)
    if value is None or value.op != "add":
        return False
    for side in (value.input, value["other"]):
        mean = _peel(side)
        if mean is not None and mean.op == "mean" and _peel(mean.input) is not None and _peel(mean.input).op == "square":
            return True
    return False


def _rms_norm(view: View) -> List[Value]:
    found = [v for v in _values(view, "rsqrt") if _mean_of_square(v.input)]
    found += [v for v in _values(view, "div") if v["other"] is not None and _peel(v["other"]).op == "sqrt"
              and _mean_of_square(_peel(v["other"]).input)]
    found += _values(view, "rms_norm", "rms_norm_module")
    return found


def _is_projection(value: Optional[Value]) -> bool:
    value = _peel(value, ("cast", "same", "channels"))  # a half or the even channels of a projection too
    return value is not None and value.op in PROJECTIONS


def _gated_mlp(view: View) -> List[Value]:
    found = []
    for value in _values(view, "mul"):
        for act, other in ((value.input, value["other"]), (value["other"], value.input)):
            act = _peel(act)
            if act is not None and act.op in ACTIVATIONS and _is_projection(act.input) and _is_projection(other):
                found.append(value)
                break
    return found


def _weights_discarded(view: View, topk: Value) -> bool:
    """``_, experts = topk(...)``: only the indices are used (an auxiliary load-balancing loss that
    counts assignments, not a router that weighs experts)."""
    parent = view.parents.get(id(topk.node))
    if isinstance(parent, cst.Assign) and isinstance(parent.targets[0].target, cst.Tuple):
        first = parent.targets[0].target.elements[0].value
        return isinstance(first, cst.Name) and first.value == "_"
    return False


def _router(view: View) -> List[Value]:
    found = []
    for value in _values(view, "topk"):
        if _weights_discarded(view, value):
            continue
        scores = _peel(value.input)
        if scores is not None and scores.op == "add":  # sigmoid scores plus a bias
            scores = _peel(scores.input) if _peel(scores.input).op == "sigmoid" else _peel(scores["other"])
        if scores is not None and scores.op in ("softmax", "sigmoid"):
            found.append(value)
    for value in _values(view, "softmax"):  # top-k first, softmax over the top-k logits
        source = _peel(value.input)
        if source is not None and source.op == "item" and _peel(source.input) is not None \
                and _peel(source.input).op == "topk":
            found.append(value)
    return found


def _values(view: View, *ops: str) -> List[Value]:
    seen: Set[int] = set()
    found = []
    for value in view.values.values():
        if value.op in ops and view.home(value) and id(value) not in seen:
            seen.add(id(value))
            found.append(value)
    return found


FAMILIES = (
    Family("attention", frozenset({"NPU301", "NPU302", "NPU303", "NPU106", "NPU107"}), "NPU303",
           "pattern.attention.unrecognised", frozenset({"softmax", "Softmax", "einsum"}), _attention,
           lambda v: "a softmax set in __init__ over q·kᵀ scores" if v.op == "call" else "softmax over q·kᵀ scores"),
    Family("rotary", frozenset({"NPU310", "NPU311"}), "NPU311", "pattern.rotary.unrecognised",
           frozenset({"cat", "stack", "view_as_complex", "rotate_half", "cos", "sin"}), _rotary,
           lambda v: "complex rotation" if v.op == "mul" else "x·cos ± rotate(x)·sin",
           lambda words, function: may_rotate(words, function, function.names)),  # a helper by any name
    Family("rms_norm", frozenset({"NPU320", "NPU321"}), "NPU321", "pattern.rms_norm.unrecognised",
           frozenset({"rsqrt", "sqrt", "rms_norm", "RMSNorm"}), _rms_norm,
           lambda v: "nn.RMSNorm module" if v.op == "rms_norm_module" else "x · rsqrt(mean(x²) + eps)",
           lambda words, function: computes(words, function, "mean") or computes(words, function, "rms_norm")
           or computes(words, function, "rms_norm_module")),
    Family("gated_mlp", frozenset({"NPU330", "NPU331"}), "NPU331", "pattern.gated_mlp.unrecognised",
           frozenset({"silu", "SiLU", "gelu", "GELU", "act", "act_fn", "activation", "sigmoid"}), _gated_mlp,
           lambda v: "act(projection) · projection", lambda words, function: computes(words, function, "mul")),
    Family("router", frozenset({"NPU340", "NPU341"}), "NPU341", "pattern.router.unrecognised",
           frozenset({"topk"}), _router, lambda v: "top-k over softmax/sigmoid expert scores",
           lambda words, function: computes(words, function, "topk")
           and (computes(words, function, "softmax") or computes(words, function, "sigmoid"))),
)


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
    families = [f for f in FAMILIES if enabled(f.report)]
    if not families or ctx.is_helper:
        return
    parents = ctx.tree.parents()
    functions = ctx.tree.of_type(ctx.module, cst.FunctionDef)
    for family in families:
        sites = [s for s in ctx.sites if s.finding.code in family.codes]
        edited = {id(n) for s in sites for n in _edited_spans(s)}
        anchored = {id(statement_of(s.anchor, parents)) for s in sites} | {id(s.anchor) for s in sites}
        for func in functions:
            if not ctx.tree.names(func.body) & family.words:
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
