"""What a function's dataflow view (``view.build``) resolves names against: the module's functions
bound once, the enclosing class's methods and the ``self.<attr>`` values its ``__init__`` assigns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import libcst as cst

from .syntax import assigned_names

Qualify = Callable[[cst.CSTNode], Optional[str]]


def _params(func: cst.FunctionDef) -> List[cst.Param]:
    p = func.params
    return [*p.posonly_params, *p.params, *p.kwonly_params]


def literal_default(param: cst.Param) -> bool:
    """The parameter's default is a constant written in place (``False``, ``None``, ``2``, ``-1.0``,
    ``"half"``): what an omitted argument is, whatever the module binds later."""
    default = param.default
    if isinstance(default, cst.UnaryOperation) and isinstance(default.operator, cst.Minus):
        default = default.expression
    return isinstance(default, (cst.Integer, cst.Float, cst.SimpleString)) or \
        isinstance(default, cst.Name) and default.value in ("True", "False", "None")


def class_attributes(cls: Optional[cst.ClassDef]) -> Dict[str, cst.BaseExpression]:
    """``self.<attr> = value`` statements at the top level of the class's ``__init__``."""
    found: Dict[str, cst.BaseExpression] = {}
    body = cls.body.body if cls is not None and isinstance(cls.body, cst.IndentedBlock) else ()
    for init in (s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"):
        for stmt in init.body.body if isinstance(init.body, cst.IndentedBlock) else ():
            for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
                if isinstance(small, cst.Assign) and len(small.targets) == 1:
                    target = small.targets[0].target
                    if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) \
                            and target.value.value == "self":
                        found[target.attr.value] = small.value
    return found


@dataclass
class Scope:
    """What a view resolves names against: the module's functions, the enclosing class."""

    qualify: Qualify
    functions: Dict[str, cst.FunctionDef] = field(default_factory=dict)  # module-level defs, bound once
    cls: Optional[cst.ClassDef] = None
    methods: Dict[str, cst.FunctionDef] = field(default_factory=dict)
    attributes: Dict[str, cst.BaseExpression] = field(default_factory=dict)  # self.<attr> = ... in __init__
    parents: Dict[int, cst.CSTNode] = field(default_factory=dict)  # the module's parent map

    @classmethod
    def of(cls_, module: cst.Module, qualify: Qualify, cls: Optional[cst.ClassDef] = None,
           functions: Optional[Dict[str, cst.FunctionDef]] = None, parents=None) -> "Scope":
        if functions is None:
            functions = module_functions(module)
        methods = {s.name.value: s for s in cls.body.body if isinstance(s, cst.FunctionDef)} \
            if cls is not None and isinstance(cls.body, cst.IndentedBlock) else {}
        return cls_(qualify, functions, cls, methods, class_attributes(cls), parents or {})


def closure(func: cst.FunctionDef, parents) -> Tuple[Optional[cst.ClassDef], List[str]]:
    """Where ``func`` is defined: the class whose method it is (or, for a ``def`` nested in functions,
    the class of the method around them), and the parameters of the functions around it that their
    bodies never rebind (what its free names of that name read, whenever it is called)."""
    holder = parents.get(id(parents.get(id(func))))
    free: List[str] = []
    while isinstance(holder, cst.FunctionDef):
        rebound = set(assigned_names(holder.body))
        free += [p.name.value for p in _params(holder) if p.name.value not in rebound and p.name.value not in free]
        holder = parents.get(id(parents.get(id(holder))))
    return (holder if isinstance(holder, cst.ClassDef) else None), free


def module_functions(module: cst.Module) -> Dict[str, cst.FunctionDef]:
    """Module-level functions whose name is bound once (no reassignment, no second def)."""
    return _bound_once(module, cst.FunctionDef)


def module_classes(module: cst.Module) -> Dict[str, cst.ClassDef]:
    """Module-level classes whose name is bound once (no reassignment, no second definition)."""
    return _bound_once(module, cst.ClassDef)


def _bound_once(module: cst.Module, kind: type) -> dict:
    count: Dict[str, int] = {}
    found: dict = {}
    for stmt in module.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            count[stmt.name.value] = count.get(stmt.name.value, 0) + 1
            if isinstance(stmt, kind):
                found[stmt.name.value] = stmt
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                for target in getattr(small, "targets", ()):
                    if isinstance(target.target, cst.Name):
                        count[target.target.value] = count.get(target.target.value, 0) + 1
    return {name: node for name, node in found.items() if count[name] == 1}
