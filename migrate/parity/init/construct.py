"""How a parity case builds a model: its constructor's arguments, and the configuration object when
it takes one (a dataclass, a Hugging Face-style config class, an ``argparse`` namespace).

The configuration class is found from the constructor's annotation, a ``config_class`` attribute,
a call in the tree that builds the model from one (``GPT(GPTConfig(...))``, ``conf = Cfg(...);
Model(conf)``), or, failing those, the configuration class of the model's file whose fields cover
the most attributes the model reads from it. A model built from ``args`` with no class for it gets
an ``argparse.Namespace`` of the attributes it reads (defaults from the tree's ``add_argument``
calls). Every value comes from ``sizes``; what nothing tells becomes a ``TODO`` naming the argument
and the line that uses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

import libcst as cst

from .reach import Reach
from .sizes import NOTHING, asserted_divisions, choose, group, keep_divisions, literal
from .source import ClassInfo, Function, Tree, code_of, dotted, first_use

CONFIG_NAMES = ("config", "cfg", "conf", "args", "params", "model_args", "hparams", "hps", "model_config", "opt")
CONFIG_SUFFIXES = ("Config", "Args", "Params", "Arguments", "Cfg", "Hparams")
TODO = "TODO"


def todo(what: str, where: str) -> str:
    return f"{TODO}: {what} (used at {where}): replace this with a small value"


@dataclass
class Construction:
    model: ClassInfo
    kind: str  # "config" (a class), "namespace" (argparse-style), "kwargs" (the constructor's own arguments),
    # "function" (a tree function that builds the model: ``config`` names it)
    config: Optional[str] = None  # "path.py:Name" of a tree class, or the dotted name of an imported one
    kwargs: Dict[str, Any] = field(default_factory=dict)  # the configuration's fields, or constructor arguments
    extra: Dict[str, Any] = field(default_factory=dict)  # constructor arguments besides the configuration
    values: Dict[str, Any] = field(default_factory=dict)  # every known name -> value (input shapes read these)
    todos: List[str] = field(default_factory=list)


class _Reads(cst.CSTVisitor):
    """``<name>.attr`` reads for the configuration names, and ``self.config.attr``."""

    def __init__(self, names: Set[str]):
        self.names = names
        self.attrs: Dict[str, int] = {}
        self.nodes: Dict[str, cst.CSTNode] = {}

    def visit_Attribute(self, node: cst.Attribute) -> None:
        base = dotted(node.value)
        if base in self.names or base in {f"self.{n}" for n in self.names}:
            self.nodes.setdefault(node.attr.value, node)


class Builder:
    def __init__(self, tree: Tree, reach: Reach):
        self.tree = tree
        self.reach = reach

    def first_use(self, function: Function, name: str) -> str:
        return first_use(self.tree, function, name)

    def family(self, model: ClassInfo) -> List[ClassInfo]:
        members = self.reach._members(model)
        return [c for c in self.tree.classes() if c.where in members]

    def build(self, model: ClassInfo) -> Construction:
        init = self.reach.method(model, "__init__")
        if init is None:
            return Construction(model, "kwargs")
        params = [p for p in init.params() if p.name.value != "self" and p.star not in ("*", "**")]
        params += self._forwarded(init, {p.name.value for p in params})
        config_param = next((p for p in params if p.name.value in CONFIG_NAMES or self._config_annotation(p, init)),
                            None)
        result = Construction(model, "kwargs")
        if config_param is not None:
            self._configuration(result, model, init, config_param)
        names_defaults = {p.name.value: literal(p.default) if p.default is not None else NOTHING
                          for p in params if p is not config_param}
        chosen = choose(names_defaults)
        for p in params:
            name = p.name.value
            if p is config_param:
                continue
            if name in chosen:
                result.extra[name] = chosen[name]
            elif p.default is None:
                result.extra[name] = todo(f"constructor argument {name!r} of {model.name} ({init.where})",
                                          self.first_use(init, name))
                result.todos.append(result.extra[name])
        for name, value in names_defaults.items():
            result.values.setdefault(name, result.extra.get(name, value))
        keep_divisions(result.values, asserted_divisions(m.node for c in self.family(model) for m in c.methods.values()
                                                         if m.name == "__init__"))
        for bag in (result.kwargs, result.extra):
            for name in bag:
                if name in result.values and not isinstance(bag[name], str):
                    bag[name] = result.values[name]
        if config_param is None:
            result.kwargs, result.extra = result.extra, {}
        return result

    def from_function(self, model: ClassInfo, function: Function) -> Construction:
        """The model as a tree function builds it: the function's arguments, sized."""
        params = [p for p in function.params() if p.star not in ("*", "**")]
        names_defaults = {p.name.value: literal(p.default) if p.default is not None else NOTHING for p in params}
        chosen = choose(names_defaults)
        result = Construction(model, "function", f"{function.path}:{function.name}", dict(chosen))
        for p in params:
            if p.default is None and p.name.value not in chosen:
                result.kwargs[p.name.value] = todo(f"argument {p.name.value!r} of {function.name} ({function.where})",
                                                   self.first_use(function, p.name.value))
                result.todos.append(result.kwargs[p.name.value])
        result.values = {**{n: v for n, v in names_defaults.items() if v is not NOTHING}, **chosen}
        return result

    def _forwarded(self, init: Function, own: Set[str]) -> List[cst.Param]:
        """The parameters of the tree class ``init`` hands its ``**kwargs`` to (``PerceiverIO(**kwargs)``)."""
        star = init.node.params.star_kwarg
        if star is None:
            return []
        found: List[cst.Param] = []
        for call, given in _StarCalls(star.name.value).scan(init.node):
            target = self.tree.resolve_class(call, init.path)
            inner = self.reach.method(target, "__init__") if target is not None else None
            if inner is not None:  # less the arguments the call passes itself (PerceiverIO(queries_dim=dim, **kwargs))
                found += [p for p in inner.params() if p.name.value not in own | given and p.name.value != "self"
                          and p.star not in ("*", "**") and p.name.value not in {f.name.value for f in found}]
        return found

    # -- the configuration ---------------------------------------------------------------------
    def _config_annotation(self, param: cst.Param, init: Function) -> Optional[str]:
        if param.annotation is None:
            return None
        name = dotted(param.annotation.annotation) or code_of(param.annotation.annotation).strip("'\" ")
        last = name.split(".")[-1]
        return name if last.endswith(CONFIG_SUFFIXES) else None

    def _config_class(self, model: ClassInfo, init: Function, param: cst.Param) -> Optional[object]:
        """The tree's ClassInfo, an imported dotted name, or None."""
        annotated = self._config_annotation(param, init)
        if annotated:
            return self.tree.resolve_class(annotated, init.path) or self._imported(annotated, init.path)
        for owner in [model, *self.reach.bases(model)]:
            if "config_class" in owner.assigns:
                name = dotted(owner.assigns["config_class"])
                if name:
                    return self.tree.resolve_class(name, owner.path) or self._imported(name, owner.path)
        return self._built_with(model)

    def _imported(self, name: str, path: str) -> Optional[str]:
        origin = self.tree.files[path].imports.get(name.split(".")[0])
        return origin + name[len(name.split(".")[0]):] if origin else None

    def _built_with(self, model: ClassInfo) -> Optional[ClassInfo]:
        """A class the tree builds this model from: ``Model(Cfg(...))`` or ``c = Cfg(...); Model(c)``."""
        for source in self.tree.files.values():
            for function in [*source.functions.values(), *(m for c in source.classes.values() for m in c.methods.values())]:
                found = _ConfigCall(model.name).scan(function.node)
                if found:
                    cls = self.tree.resolve_class(found, source.path)
                    if cls is not None:
                        return cls
        return None

    def _configuration(self, result: Construction, model: ClassInfo, init: Function, param: cst.Param) -> None:
        family = self.family(model)
        reads = _Reads(set(CONFIG_NAMES) | {param.name.value})
        for cls in family:
            for method in cls.methods.values():
                method.node.visit(reads)
        read_names = list(reads.nodes)
        config = self._config_class(model, init, param) or self._by_fields(model, read_names)
        result.kind = "config"
        if isinstance(config, ClassInfo):
            result.config = f"{config.path}:{config.name}"
            fields = self._fields(config)
            chosen = choose(fields)
            result.kwargs = {n: v for n, v in chosen.items()}
            result.values.update({n: v for n, v in fields.items() if v is not NOTHING})
            result.values.update(chosen)
            for name, default in fields.items():
                if default is NOTHING and name not in chosen and name in self._required(config):
                    result.kwargs[name] = todo(f"field {name!r} of {config.name} ({config.where}), which has no default",
                                               self._read_where(reads, name, model))
                    result.todos.append(result.kwargs[name])
            return
        if isinstance(config, str):
            result.config = config
        else:
            result.kind = "namespace"
        defaults = {n: self._argparse_default(n) for n in read_names}
        chosen = choose(defaults)
        result.kwargs = dict(chosen)
        result.values.update({n: v for n, v in defaults.items() if v is not NOTHING})
        result.values.update(chosen)
        if result.kind == "namespace":
            for name in read_names:
                if name in chosen:
                    continue
                if defaults[name] is not NOTHING:
                    result.kwargs[name] = defaults[name]
                else:
                    result.kwargs[name] = todo(f"attribute {name!r} of the {param.name.value} that {model.name} "
                                               f"({model.where}) is built from", self._read_where(reads, name, model))
                    result.todos.append(result.kwargs[name])

    def _read_where(self, reads: _Reads, name: str, model: ClassInfo) -> str:
        node = reads.nodes.get(name)
        for source in self.tree.files.values():
            try:
                return f"{source.path}:{source.line(node)}"
            except KeyError:
                continue
        return model.where

    def _by_fields(self, model: ClassInfo, reads: List[str]) -> Optional[ClassInfo]:
        source = self.tree.files[model.path]
        candidates = [c for c in self.tree.classes()
                      if (c.path == model.path or c.name in source.imports) and
                      (c.is_dataclass or c.name.endswith(CONFIG_SUFFIXES) or any("Config" in b for b in c.bases))]
        scored = sorted(((len(set(self._fields(c)) & set(reads)), c) for c in candidates), key=lambda t: -t[0])
        return scored[0][1] if scored and scored[0][0] else None

    def _fields(self, config: ClassInfo) -> Dict[str, Any]:
        fields: Dict[str, Any] = {}
        for base in reversed(self.reach.bases(config)):
            fields.update(self._fields(base))
        for name, value, _ in config.fields:
            if not name.startswith("_"):
                fields[name] = literal(value) if value is not None else NOTHING
        init = config.methods.get("__init__")
        if init is not None and not config.is_dataclass:
            for p in init.params():
                if p.name.value != "self" and p.star not in ("*", "**"):
                    fields[p.name.value] = literal(p.default) if p.default is not None else NOTHING
        if not config.fields and init is None:
            fields.update({n: literal(v) for n, v in config.assigns.items() if not n.startswith("_")})
        return fields

    def _required(self, config: ClassInfo) -> Set[str]:
        init = config.methods.get("__init__")
        if init is not None and not config.is_dataclass:
            return {p.name.value for p in init.params() if p.default is None and p.star not in ("*", "**")} - {"self"}
        return {n for n, v, _ in config.fields if v is None}

    def _argparse_default(self, name: str) -> Any:
        for source in self.tree.files.values():
            found = _ArgumentDefault(name).scan(source.module)
            if found is not NOTHING:
                return found
        return NOTHING


class _ConfigCall(cst.CSTVisitor):
    def __init__(self, model: str):
        self.model = model
        self.assigned: Dict[str, str] = {}
        self.found: Optional[str] = None

    def scan(self, node: cst.CSTNode) -> Optional[str]:
        node.visit(self)
        return self.found

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            name = dotted(node.value.func)
            if name:
                self.assigned[node.targets[0].target.value] = name

    def visit_Call(self, node: cst.Call) -> None:
        name = dotted(node.func)
        if self.found or not name or name.split(".")[-1] != self.model or not node.args:
            return
        first = node.args[0].value
        if isinstance(first, cst.Call) and dotted(first.func):
            self.found = dotted(first.func)
        elif isinstance(first, cst.Name) and first.value in self.assigned:
            self.found = self.assigned[first.value]


class _StarCalls(cst.CSTVisitor):
    """Names called with ``**name`` (the constructor's ``**kwargs`` handed on), with the keywords
    each such call passes itself."""

    def __init__(self, name: str):
        self.name = name
        self.found: List[Tuple[str, Set[str]]] = []

    def scan(self, node: cst.CSTNode) -> List[Tuple[str, Set[str]]]:
        node.visit(self)
        return self.found

    def visit_Call(self, node: cst.Call) -> None:
        if any(a.star == "**" and isinstance(a.value, cst.Name) and a.value.value == self.name for a in node.args):
            name = dotted(node.func)
            if name:
                self.found.append((name, {a.keyword.value for a in node.args if a.keyword is not None}))


class _ArgumentDefault(cst.CSTVisitor):
    """The ``default=`` of ``add_argument("--name", ...)``."""

    def __init__(self, name: str):
        self.flags = {f"--{name}", f"--{name.replace('_', '-')}"}
        self.found: Any = NOTHING

    def scan(self, module: cst.Module) -> Any:
        module.visit(self)
        return self.found

    def visit_Call(self, node: cst.Call) -> None:
        if not isinstance(node.func, cst.Attribute) or node.func.attr.value != "add_argument":
            return
        if any(literal(a.value) in self.flags for a in node.args if a.keyword is None):
            for a in node.args:
                if a.keyword is not None and a.keyword.value == "default":
                    self.found = literal(a.value)


def size_names(values: Dict[str, Any], kind: str) -> List[str]:
    return [n for n in values if group(n) == kind]
