"""A normalised dataflow view of one function, that every fused rule matches on.

``View(func, ...)`` evaluates the function's statements in order into ``Value``s: SSA over its local
names (a name is followed across statements and re-assignments; an ``if`` without an early exit
merges its branches into a ``phi``; a name assigned in a loop is opaque after it), every call,
method and operator spelled as one canonical op with named arguments (``view.spellings``, then the
normalisations of ``view.normal``), module attributes resolved from the class's ``__init__``
(``self.act = nn.SiLU()`` makes ``self.act(x)`` a ``silu``), and small helpers of the same module or
class inlined (``rotate_half(x)``, ``self._norm(x)``, a nested ``def``): their bodies are evaluated
in place with the call's arguments, so a matcher sees through them. A nested ``def`` reads the names
of the function around it (a closure): inlined at a call, the bindings at the call; viewed on its
own, the enclosing function's parameters that are never rebound (``self`` of the method it is in).

Each value keeps the expression node it was computed from (``node``) and the view it belongs to,
so a match maps back to source: the statements of the function that compute it (``statement``),
and source text for its operands.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import libcst as cst

from .normal import normalise
from .values import Value
from .scope import Scope, _params, literal_default
from .spellings import ATTRIBUTE_FUNCTIONS, AUGMENTED, CAST_METHODS, FUNCTIONS, METHODS, MODULES, OPERATORS, UNARY
from ..tree import children
from .ops import Op
from .syntax import assigned_names, body_of, decorated, dotted, ends_in_return, in_place, in_place_receiver, literal, walk_names

INLINE_DEPTH = 3
SEQUENTIAL = "torch.nn.Sequential"  # a module that calls its members in order
INLINE_STATEMENTS = 30


def _binds_names_only(suite) -> bool:
    """The branch only binds local names and returns (an ``elif`` chain likewise): choosing it is choosing a
    value. A branch that writes state (``self.cache[k] = ...``, a bare call) is not read as such."""
    if isinstance(suite, cst.If):
        return _binds_names_only(suite.body) and (suite.orelse is None or _binds_names_only(suite.orelse))
    for stmt in body_of(suite.body if isinstance(suite, cst.Else) else suite):
        if not isinstance(stmt, cst.SimpleStatementLine):
            return False
        for small in stmt.body:
            if isinstance(small, cst.Assign):
                targets = [t.target for t in small.targets]
            elif isinstance(small, cst.AnnAssign):
                targets = [small.target]
            elif isinstance(small, (cst.Return, cst.Pass)):
                continue
            else:
                return False
            if not all(_local_target(t) for t in targets):
                return False
    return True


def _local_target(target: cst.BaseExpression) -> bool:
    if isinstance(target, (cst.Tuple, cst.List)):
        return all(not isinstance(e, cst.StarredElement) and _local_target(e.value) for e in target.elements)
    return isinstance(target, cst.Name)


class View:
    def __init__(self, func: cst.FunctionDef, scope: Scope, arguments: Optional[Dict[str, Value]] = None,
                 depth: int = 0, caller: Optional[cst.CSTNode] = None,
                 enclosing: Optional[Dict[str, Value]] = None) -> None:
        self.func, self.scope, self.depth = func, scope, depth
        self.caller = caller  # the call node that inlined this view, when it is inlined
        self.enclosing = enclosing or {}  # a nested def's closure: names of the function around it
        self.values: Dict[int, Value] = {}  # id(expression node) -> its value
        self.env_before: Dict[int, Dict[str, "Value"]] = {}  # id(statement) -> the bindings where it starts
        self.returns: List[Value] = []
        self.env: Dict[str, Value] = {}
        self.opaque_exit = False  # a return inside a branch or loop: the function is not straight-line
        self.early: List[Tuple[Value, Value]] = []  # (test, value) of `if test: return value` at the top level
        self.unread: Dict[int, str] = {}  # id(call of a helper of this module or class) -> why it is not inlined
        for param in _params(func):
            name = param.name.value
            given = (arguments or {}).get(name)
            if given is None and arguments is not None and literal_default(param):
                given = self.value(param.default)  # an inlined helper's `interleaved=False` not passed
            self.env[name] = given if given is not None else Value(Op.PARAM, name=name, view=self)
        for star in (func.params.star_arg, func.params.star_kwarg):
            if isinstance(star, cst.Param):
                self.env[star.name.value] = Value(Op.PARAM, name=star.name.value, view=self)
        self.block(func.body.body if isinstance(func.body, cst.IndentedBlock) else ())

    # -- statements -------------------------------------------------------------------------------
    def block(self, statements: Sequence[cst.BaseStatement], top: bool = True) -> None:
        for stmt in statements:
            self.statement(stmt, top)

    def statement(self, stmt: cst.BaseStatement, top: bool = True) -> None:
        self.env_before[id(stmt)] = dict(self.env)
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                self.small(small, top)
        elif isinstance(stmt, cst.If) and top and ends_in_return(stmt.body) and (
                stmt.orelse is None or _binds_names_only(stmt.body) and _binds_names_only(stmt.orelse)):
            test = self.value(stmt.test)
            before = dict(self.env)
            body = body_of(stmt.body)
            self.block(body[:-1], False)
            returned = body[-1].body[0].value
            if returned is not None and not self.opaque_exit:
                self.early.append((test, self.value(returned)))
            else:
                self.opaque_exit = True
            self.env = before  # the branch left the function: after the if, the other path goes on
            if isinstance(stmt.orelse, cst.If):  # `elif`: after an early return, a plain `if`
                self.statement(stmt.orelse, top)
            elif isinstance(stmt.orelse, cst.Else):  # `else:` after an early return: straight-line code
                self.block(body_of(stmt.orelse.body), top)
        elif isinstance(stmt, cst.If):
            self.value(stmt.test)
            before = dict(self.env)
            self.block(body_of(stmt.body), False)
            then_env, self.env = self.env, dict(before)
            if isinstance(stmt.orelse, cst.If):
                self.statement(stmt.orelse, False)
            elif isinstance(stmt.orelse, cst.Else):
                self.block(body_of(stmt.orelse.body), False)
            self._merge(stmt.test, then_env, self.env)
        elif isinstance(stmt, (cst.For, cst.While)):
            if isinstance(stmt, cst.For):
                self.value(stmt.iter)
            assigned = assigned_names(stmt)
            for name in assigned:
                self.env[name] = Value(Op.OPAQUE, name=name, view=self)  # loop-carried
            self.block(body_of(stmt.body), False)
            for name in assigned:
                self.env[name] = Value(Op.OPAQUE, name=name, view=self)
        elif isinstance(stmt, cst.With):
            for item in stmt.items:
                self.value(item.item)
            self.block(body_of(stmt.body), top)
        elif isinstance(stmt, (cst.Try, cst.TryStar)):
            assigned = assigned_names(stmt)
            self.block(body_of(stmt.body), False)
            for handler in stmt.handlers:
                self.block(body_of(handler.body), False)
            for name in assigned:
                self.env[name] = Value(Op.OPAQUE, name=name, view=self)
        elif isinstance(stmt, cst.FunctionDef):
            self.env[stmt.name.value] = Value(Op.FUNCTION, node=stmt, name=stmt.name.value, view=self)
        elif isinstance(stmt, cst.ClassDef):
            self.env[stmt.name.value] = Value(Op.OPAQUE, name=stmt.name.value, view=self)

    def _merge(self, test: cst.BaseExpression, then_env: Dict[str, Value], else_env: Dict[str, Value]) -> None:
        merged = {}
        for name in set(then_env) | set(else_env):
            a, b = then_env.get(name), else_env.get(name)
            if a is b:
                merged[name] = a
            elif a is None or b is None:
                merged[name] = Value(Op.OPAQUE, name=name, view=self)  # bound on one path only
            else:
                merged[name] = Value(Op.PHI, {"test": self.value(test), "then": a, "else": b}, view=self)
        self.env = merged

    def small(self, small: cst.BaseSmallStatement, top: bool) -> None:
        if isinstance(small, cst.Assign):
            value = self.value(small.value)
            for target in small.targets:
                self.bind(target.target, value)
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            self.bind(small.target, self.value(small.value))
        elif isinstance(small, cst.AugAssign):
            op = AUGMENTED.get(type(small.operator))
            current = self.value(small.target)
            value = self._make(op, {"input": current, "other": self.value(small.value)}, small) if op else \
                Value(Op.OPAQUE, node=small, view=self)
            self.bind(small.target, value)
        elif isinstance(small, cst.Return):
            if small.value is not None:
                self.returns.append(self.value(small.value))
            if not top:
                self.opaque_exit = True
        elif isinstance(small, cst.Expr):
            value = self.value(small.value)
            receiver = in_place_receiver(small.value)
            if receiver is not None and receiver in self.env:  # x.scatter_(...): x now holds the result
                old = self.env[receiver]
                for name, bound in list(self.env.items()):
                    if bound is old:
                        self.env[name] = value

    def bind(self, target: cst.BaseExpression, value: Value) -> None:
        if isinstance(target, cst.Name):
            self.env[target.value] = value
        elif isinstance(target, (cst.Tuple, cst.List)):
            starred = False
            for index, element in enumerate(target.elements):
                starred = starred or isinstance(element, cst.StarredElement)
                if starred:  # `*rest` and what follows it: positions unknown
                    self._opaque_targets(element)
                    continue
                literal = value.op == Op.TUPLE and not any(i.op == Op.UNPACK for i in value.items)
                item = value.items[index] if literal and index < len(value.items) else \
                    normalise(Value(Op.ITEM, {"input": value}, number=index, view=self))
                self.bind(element.value, item)
        else:
            self.value(target)  # self.x = ..., x[i] = ...: reads only

    def _opaque_targets(self, target: cst.CSTNode) -> None:
        for node in walk_names(target):
            self.env[node] = Value(Op.OPAQUE, name=node, view=self)

    # -- expressions ------------------------------------------------------------------------------
    def value(self, node: cst.CSTNode) -> Value:
        found = self.values.get(id(node))
        if found is None:
            found = self.values[id(node)] = self._evaluate(node)
        return found

    def _make(self, op: str, kw: Dict[str, Value], node: cst.CSTNode, **extra) -> Value:
        return normalise(Value(op, kw, node=node, view=self, **extra))

    def _evaluate(self, node: cst.CSTNode) -> Value:
        if isinstance(node, cst.Name):
            bound = self.env.get(node.value)
            if bound is None:
                bound = self.enclosing.get(node.value)  # a closure's free name
            if bound is not None:
                return bound
            if node.value in ("True", "False", "None"):
                return Value(Op.CONST, node=node, view=self, name=node.value,
                             number={"True": 1.0, "False": 0.0}.get(node.value))
            qualified = self.scope.qualify(node)
            return Value(Op.NAME if qualified else Op.FREE, node=node, view=self, name=qualified or node.value)
        if isinstance(node, cst.Ellipsis):
            return Value(Op.CONST, node=node, view=self, name="...")
        if isinstance(node, (cst.Integer, cst.Float)):
            return Value(Op.CONST, node=node, view=self, number=float(node.evaluated_value))
        if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
            text = node.evaluated_value
            return Value(Op.STR, node=node, view=self, name=text if isinstance(text, str) else None)
        if isinstance(node, cst.Attribute):
            return self._attribute(node)
        if isinstance(node, cst.Call):
            return self._call(node)
        if isinstance(node, cst.BinaryOperation):
            op = OPERATORS.get(type(node.operator))
            kw = {"input": self.value(node.left), "other": self.value(node.right)}
            return self._make(op, kw, node) if op else Value(Op.OPAQUE, kw, node=node, view=self)
        if isinstance(node, cst.UnaryOperation):
            inner = self.value(node.expression)
            if isinstance(node.operator, cst.Minus):
                if inner.op == Op.CONST and inner.number is not None:
                    return Value(Op.CONST, node=node, view=self, number=-inner.number)
                return self._make(Op.NEG, {"input": inner}, node)
            op = UNARY.get(type(node.operator))
            return self._make(op, {"input": inner}, node) if op else Value(Op.OPAQUE, {"input": inner}, node=node, view=self)
        if isinstance(node, (cst.Tuple, cst.List)):
            items = tuple(Value(Op.UNPACK, {"input": self.value(e.value)}, view=self)
                          if isinstance(e, cst.StarredElement) else self.value(e.value) for e in node.elements)
            return Value(Op.TUPLE, node=node, view=self, items=items)
        if isinstance(node, cst.Subscript):
            return self._subscript(node)
        if isinstance(node, cst.IfExp):
            kw = {"test": self.value(node.test), "then": self.value(node.body), "else": self.value(node.orelse)}
            return Value(Op.PHI, kw, node=node, view=self)
        if isinstance(node, cst.Comparison):
            kw = {"input": self.value(node.left)}
            for index, part in enumerate(node.comparisons):
                kw[f"other{index}"] = self.value(part.comparator)
            ops = "".join(type(p.operator).__name__ for p in node.comparisons)
            return Value(Op.COMPARE, kw, node=node, view=self, name=ops)
        for child in children(node):
            if isinstance(child, cst.BaseExpression):
                self.value(child)
        return Value(Op.OPAQUE, node=node, view=self)

    def _attribute(self, node: cst.Attribute) -> Value:
        base = self.value(node.value)
        if base.op == Op.NAME and base.name:  # torch.float32, math.pi, torch.nn.functional
            return Value(Op.NAME, node=node, view=self, name=f"{base.name}.{node.attr.value}")
        if node.attr.value == "mT":
            return self._make(Op.TRANSPOSED, {"input": base}, node)
        return self._make(Op.ATTR, {"input": base}, node, name=node.attr.value)

    def _subscript(self, node: cst.Subscript) -> Value:
        base = self.value(node.value)
        kw = {"input": base}
        for index, element in enumerate(node.slice):
            part = element.slice
            if isinstance(part, cst.Index):
                kw[f"index{index}"] = self.value(part.value)
            else:
                for bound in ("lower", "upper", "step"):
                    if getattr(part, bound) is not None:
                        kw[f"{bound}{index}"] = self.value(getattr(part, bound))
                kw.setdefault(f"slice{index}", Value(Op.SLICE, view=self))
        return self._make(Op.GETITEM, kw, node)

    # -- calls ------------------------------------------------------------------------------------
    def _arguments(self, call: cst.Call, params: Tuple[str, ...], offset: int = 0) -> Optional[Dict[str, Value]]:
        """The call's arguments by parameter name (after ``offset`` leading params), or None."""
        bound: Dict[str, Value] = {}
        positional = [a for a in call.args if a.keyword is None]
        names = params[offset:]
        for index, arg in enumerate(positional):
            if names and names[-1] == "*rest" and index >= len(names) - 1 and arg.star != "**":
                rest = bound.setdefault("*rest", Value(Op.TUPLE, view=self))
                item = self.value(arg.value)  # `*x.shape[:-1]`: an unpacked item
                rest.items = (*rest.items, Value(Op.UNPACK, {"input": item}, view=self) if arg.star else item)
                continue
            if arg.star:
                return None
            if index >= len(names):
                return None
            bound[names[index]] = self.value(arg.value)
        for arg in call.args:
            if arg.keyword is not None:
                if arg.star or (arg.keyword.value not in params and "*rest" not in params):
                    return None
                bound[arg.keyword.value] = self.value(arg.value)
        return bound

    def _call(self, node: cst.Call) -> Value:
        func = node.func
        qualified = self.scope.qualify(func) if dotted(func) else None
        if qualified in FUNCTIONS:
            op, params = FUNCTIONS[qualified]
            kw = self._arguments(node, params)
            if kw is not None:
                return self._make(op, kw, node)
        if qualified is None and isinstance(func, cst.Attribute):
            receiver = self.value(func.value)
            method = func.attr.value
            is_self = receiver.op == Op.PARAM and receiver.name in ("self", "cls")  # a module, not a tensor
            spec = METHODS.get(method) or (METHODS.get(method[:-1]) if in_place(method) else None)
            if receiver.op not in (Op.NAME, Op.FREE) and not is_self and spec is not None:
                op, params = spec
                kw = self._arguments(node, params)
                if kw is not None:
                    kw["input"] = receiver
                    if method in CAST_METHODS:
                        kw["dtype"] = Value(Op.NAME, name=CAST_METHODS[method], view=self)
                    return self._make(op, kw, node)
        callee = self.value(func)
        args = [self.value(a.value) for a in node.args]
        inlined = self._inline(node, callee, args)
        if inlined is not None:
            return inlined
        chain = self._module_ops(callee)
        if chain and len(args) == 1 and node.args[0].keyword is None:
            value = args[0]
            for op, extra, module in chain:  # nn.Sequential(nn.Softmax(dim=-1), nn.Dropout(p)): one op per member
                value = self._make(op, {"input": value, "module": module, **extra}, node)
            return value
        kw = {"callee": callee, **{f"arg{i}": a for i, a in enumerate(args)}}
        return Value(Op.CALL, kw, node=node, view=self, name=qualified)

    def _module_ops(self, callee: Value) -> List[Tuple[str, Dict[str, Value], Value]]:
        """(op, extra arguments, the module) for each op that calling ``callee`` computes, in order:
        one for ``self.act`` set to a module in ``__init__`` (``nn.SiLU()``; ``ACT2FN[...]``, known
        only at run time, computes "act"); one per member of an ``nn.Sequential`` of such modules,
        each member being ``callee[i]``; one for a module built and called in place
        (``nn.Softmax(dim=-1)(scores)``); [] otherwise."""
        if callee.op == Op.CALL and isinstance(callee.node, cst.Call):
            found = self._module_op(callee.node)
            return [(*found, callee)] if found is not None and found[0] != "act" else []
        if not (callee.op == Op.ATTR and callee.input is not None and callee.input.op == Op.PARAM
                and callee.input.name == "self"):
            return []
        made = self.scope.attributes.get(callee.name)
        if isinstance(made, cst.Call) and self.scope.qualify(made.func) == SEQUENTIAL:
            if not made.args or any(a.keyword is not None or a.star for a in made.args):
                return []
            members = [self._module_op(a.value) for a in made.args]
            if any(m is None or m[0] == "act" for m in members):
                return []
            return [(op, extra, Value(Op.GETITEM, {"input": callee, "index0": Value(Op.CONST, view=self, number=i)},
                                      view=self)) for i, (op, extra) in enumerate(members)]
        found = self._module_op(made) if made is not None else None
        return [(*found, callee)] if found is not None else []

    def _module_op(self, made: cst.BaseExpression) -> Optional[Tuple[str, Dict[str, Value]]]:
        """What a module built by ``made`` computes on one tensor: ("silu", {}) for ``nn.SiLU()``,
        ("softmax", {"dim": ...}) for ``nn.Softmax(dim=-1)``, ("act", {}) for an activation known only
        at run time (``ACT2FN[config.hidden_act]``, ``get_activation(...)``), else None."""
        target = made.func if isinstance(made, cst.Call) else made
        qualified = self.scope.qualify(target) if isinstance(target, (cst.Name, cst.Attribute)) else None
        if qualified in FUNCTIONS and made is target and FUNCTIONS[qualified][0] in ATTRIBUTE_FUNCTIONS:
            return FUNCTIONS[qualified][0], {}  # self.act = F.silu: the function itself
        if qualified in MODULES:
            op = MODULES[qualified][0]
            extra = {}
            if op == "softmax" and isinstance(made, cst.Call):
                dims = [a.value for a in made.args if (a.keyword is None or a.keyword.value == "dim")]
                dim = literal(dims[0]) if dims else None
                if dim is not None:  # a constant of __init__: no node of this function
                    extra["dim"] = Value(Op.CONST, view=self, number=dim)
            return op, extra
        if isinstance(made, (cst.Subscript, cst.Call)) and not (qualified or "").startswith("torch."):
            return "act", {}  # ACT2FN[...], get_activation(...): an activation known only at run time
        return None

    def _inline(self, node: cst.Call, callee: Value, args: List[Value]) -> Optional[Value]:
        func, bound_self, enclosing = None, [], None
        if callee.op == Op.FUNCTION:  # a def of this function: its closure reads the bindings here
            func, enclosing = callee.node, {**self.enclosing, **self.env}
        elif callee.op == Op.FREE and callee.name in self.scope.functions:
            func = self.scope.functions[callee.name]
        elif callee.op == Op.ATTR and callee.input is not None and callee.input.op == Op.PARAM \
                and callee.input.name == "self" and callee.name in self.scope.methods:
            func = self.scope.methods[callee.name]
            bound_self = [] if decorated(func, "staticmethod") else [callee.input]
        if func is None or func is self.func:
            return None
        bound, why = self._bound_arguments(node, func, [*bound_self, *args])
        if why is None and self.depth >= INLINE_DEPTH:
            why = f"it is called {INLINE_DEPTH} helpers deep"
        if why is None and len(body_of(func.body)) > INLINE_STATEMENTS:
            why = f"its body has more than {INLINE_STATEMENTS} statements"
        inner = View(func, self.scope, bound, self.depth + 1, caller=node, enclosing=enclosing) if why is None \
            else None
        result = inner.result() if inner is not None else None
        if inner is not None and result is None:
            why = "it does not return one value on a straight path (a return inside a loop, try or nested if)"
        if why is not None:
            self.unread[id(node)] = why
        return result

    def _bound_arguments(self, node: cst.Call, func: cst.FunctionDef,
                         given: List[Value]) -> Tuple[Dict[str, Value], Optional[str]]:
        """The call's arguments by the helper's parameter names (positional, then keywords naming a
        parameter), or why they cannot be bound so (``*args``, ``**kwargs``, too many, an unknown keyword)."""
        if any(a.star for a in node.args):
            return {}, "it is called with unpacked arguments"
        params = [p.name.value for p in _params(func)]
        positional = len(given) - sum(a.keyword is not None for a in node.args)
        if positional > len(params):
            return {}, "it is called with more arguments than it has parameters"
        bound = dict(zip(params, given[:positional]))
        for arg, value in zip(node.args[len(node.args) - (len(given) - positional):], given[positional:]):
            name = arg.keyword.value
            if name not in params:
                return {}, f"it is called with a keyword `{name}` that names none of its parameters"
            if name in bound:
                return {}, f"it is called with `{name}` given twice"
            bound[name] = value
        return bound, None

    def result(self) -> Optional[Value]:
        """The one value the function returns (early ``if test: return x`` exits folded into a
        ``phi``), or None when control flow makes it unclear."""
        if self.opaque_exit or len(self.returns) != 1:
            return None
        value = self.returns[0]
        for test, early in reversed(self.early):
            value = Value(Op.PHI, {"test": test, "then": early, "else": value}, view=self)
        return value

    # -- mapping back to source -----------------------------------------------------------------
    @property
    def parents(self) -> Dict[int, cst.CSTNode]:
        return self.scope.parents

    def home(self, value: Value) -> bool:
        """Whether ``value`` is computed by code of this function (not of an inlined helper)."""
        return value.view is self and value.node is not None
