"""The cases ``parity init`` writes, one set per top-level model that reaches a rewritten site.

Per model: ``<Model>`` in float32 and bfloat16, ``<Model>-amp`` under bfloat16 autocast with a
training step, ``<Model>-train`` (a training step in float32), ``<Model>-decode`` when its forward
takes a KV cache, ``<Model>-padded`` (a left-padded batch, with a training step) when it takes a
padding mask, and ``<Model>-<flag>`` for each boolean configuration field or constructor
argument that an ``if`` around one of its sites reads (``if self.flash: ... else: <site>``), flipped,
so the other branch's site runs too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set

import libcst as cst

from .construct import Builder, Construction
from .inputs import InputReader, Inputs
from .reach import Model, Reach, Site
from .source import Tree, dotted


@dataclass
class Draft:
    name: str
    model: Model
    built: Construction
    inputs: Inputs
    runs: Dict[str, Any]  # dtypes / amp / train of this case
    flipped: Dict[str, bool] = field(default_factory=dict)  # a variant's flipped flags
    decode: bool = False
    padded: bool = False  # a left-padded batch with its mask (parity.init.harness.Padded)
    label: str = ""  # the model's name in the spec (its class, with its module when two share one)

    @property
    def todos(self) -> List[str]:
        return [*self.built.todos, *self.inputs.todos]


class _Guards(cst.CSTVisitor):
    """Names an ``if`` test reads (``self.x``, ``config.x``, ``x``) for the ifs around some lines."""

    def __init__(self, source, lines: Set[int]):
        self.source = source
        self.lines = lines
        self.names: Set[str] = set()

    def visit_If(self, node: cst.If) -> None:
        start, end = self.source.span(node)
        if any(start <= line <= end for line in self.lines):
            for part in _names(node.test):
                self.names.add(part)


def _names(node: cst.CSTNode) -> Set[str]:
    found: Set[str] = set()

    class Names(cst.CSTVisitor):
        def visit_Attribute(self, n: cst.Attribute) -> bool:
            name = dotted(n)
            if name:
                found.add(name.split(".")[-1])
            return False

        def visit_Name(self, n: cst.Name) -> None:
            found.add(n.value)

    node.visit(Names())
    return found


OUTPUT_FIELDS = ("logits", "last_hidden_state", "prediction_logits", "sample", "pred")


class _Returned(cst.CSTVisitor):
    """The output field a forward returns its result in (``return Output(logits=logits, ...)``)."""

    def __init__(self):
        self.field: Optional[str] = None

    def visit_Return(self, node: cst.Return) -> None:
        if isinstance(node.value, cst.Call) and self.field is None:
            keywords = {a.keyword.value for a in node.value.args if a.keyword is not None}
            self.field = next((f for f in OUTPUT_FIELDS if f in keywords), None)


class _SelfAssign(cst.CSTVisitor):
    def __init__(self):
        self.found: Dict[str, Set[str]] = {}

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            name = dotted(target.target)
            if name and name.startswith("self."):
                self.found.setdefault(name[5:], set()).update(_names(node.value))


class Planner:
    def __init__(self, tree: Tree, reach: Reach):
        self.tree = tree
        self.reach = reach
        self.builder = Builder(tree, reach)
        self.reader = InputReader(tree, reach)
        self.left_out: List[Draft] = []  # models with a TODO whose sites other cases run (not written)

    def plan(self, models: List[Model]) -> List[Draft]:
        """The drafts of every model; a model that cannot be built without a TODO (a wrapper taking
        a module, say) is replaced by the reaching classes it contains when those cover its sites
        with no TODO. Case and factory names are the class's, with its module when two share one."""
        chosen: List[Model] = []
        for model in models:
            chosen += self._buildable(model, set())
        unique = {(m.cls.where, m.builder.name if m.builder is not None else None): m for m in chosen}
        chosen = list(unique.values())  # a class two models were replaced by gets its cases once
        repeated = {m.cls.name for m in chosen if sum(o.cls.name == m.cls.name for o in chosen) > 1}
        drafts: List[Draft] = []
        for model in chosen:
            label = model.cls.name
            if model.builder is not None:
                label = model.builder.name
            elif label in repeated:
                label = model.cls.path[:-3].replace("/", ".") + "." + label
            drafts += self.drafts(model, label)
        return self._covered(drafts)

    def _covered(self, drafts: List[Draft]) -> List[Draft]:
        """The drafts less those of a model with a TODO whose sites the models with none all run
        (kept in ``left_out`` for the spec's header): a TODO stops the whole spec, and those sites
        are exercised anyway."""
        ready = set().union(*(d.model.sites for d in drafts if not d.todos)) if drafts else set()
        self.left_out = [d for d in drafts if d.todos and d.model.sites <= ready]
        return [d for d in drafts if not any(d is out for out in self.left_out)]

    def _buildable(self, model: Model, seen: Set[str]) -> List[Model]:
        seen = seen | {model.cls.where}
        own = self.drafts(model, model.cls.name)
        if not own[0].todos:
            return [model]
        parts = [Model(c, set(self.reach.class_reach(c)), self.reach._members(c))
                 for c in self.reach.contained(model.cls) if c.where not in seen and self.reach.class_reach(c)]
        replaced: List[Model] = []
        for part in parts:
            replaced += self._buildable(part, seen)
        covered = set().union(*(m.sites for m in replaced)) if replaced else set()
        if replaced and model.sites <= covered and all(not self.drafts(m, m.cls.name)[0].todos for m in replaced):
            return replaced
        return self._by_builders(model) or [model]

    def _by_builders(self, model: Model) -> List[Model]:
        """Tree functions that build models with no TODO and together run every site of ``model``
        (chosen greedily, the one running most of the rest first), else none."""
        usable = [b for b in self.reach.builders() if b.sites & model.sites and not self.drafts(b, b.builder.name)[0].todos]
        chosen: List[Model] = []
        covered: Set[Site] = set()
        while True:
            best = max(usable, key=lambda b: len(b.sites & model.sites - covered), default=None)
            if best is None or not best.sites & model.sites - covered:
                return chosen if model.sites <= covered else []
            chosen.append(best)
            covered |= best.sites

    def drafts(self, model: Model, name: str) -> List[Draft]:
        built = self.builder.build(model.cls) if model.builder is None else \
            self.builder.from_function(model.cls, model.builder)
        inputs = self.reader.read(model.cls, built)
        forward = self.reach.method(model.cls, "forward")
        returned = _Returned()
        if forward is not None:
            forward.node.visit(returned)
        if returned.field:
            inputs.output = returned.field
        cases = [Draft(name, model, built, inputs, {"dtypes": ["float32", "bfloat16"]})]
        if built.todos or inputs.todos:
            cases[0].label = name
            return cases  # one case carries the TODOs; the rest are written once they are filled
        cases.append(Draft(f"{name}-amp", model, built, inputs, {"amp": "bfloat16", "train": True}))
        cases.append(Draft(f"{name}-train", model, built, inputs, {"train": True}))
        if inputs.decode:
            cases.append(Draft(f"{name}-decode", model, built, inputs, {"dtypes": ["float32", "bfloat16"]}, decode=True))
        if inputs.mask:
            cases.append(Draft(f"{name}-padded", model, built, inputs, {"dtypes": ["float32"], "train": True}, padded=True))
        for flag in self._flags(model, built):
            cases.append(Draft(f"{name}-{flag}-{str(not built.values[flag]).lower()}", model, built, inputs,
                               {"dtypes": ["float32"], "train": True}, {flag: not built.values[flag]}))
        for case in cases:
            case.label = name
        return cases

    def _flags(self, model: Model, built: Construction) -> List[str]:
        """Boolean fields or arguments read by an ``if`` around one of the model's sites."""
        by_file: Dict[str, Set[int]] = {}
        for site in model.sites:
            by_file.setdefault(site.path, set()).add(site.line)
        tested: Set[str] = set()
        for path, lines in by_file.items():
            source = self.tree.files.get(path)
            if source is None:
                continue
            guards = _Guards(source, lines)
            source.module.visit(guards)
            tested |= guards.names
        assigned: Dict[str, Set[str]] = {}
        for cls in self.builder.family(model.cls):
            init = cls.methods.get("__init__")
            if init is not None:
                visitor = _SelfAssign()
                init.node.visit(visitor)
                for key, names in visitor.found.items():
                    assigned.setdefault(key, set()).update(names)
        names = set(tested)
        for name in tested:
            names |= assigned.get(name, set())
        settable = set(built.kwargs) | set(built.extra) | {n for n in built.values}
        return sorted(n for n in names if isinstance(built.values.get(n), bool) and n in settable)
