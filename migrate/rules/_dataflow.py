"""Small data-flow pieces for the fused-pattern rules (RMSNorm, SwiGLU, MoE gating).

A pattern such as ``x * rsqrt(mean(x²) + eps) * w`` is often spread over several statements
(``variance = ...``, ``hidden = hidden * torch.rsqrt(variance + eps)``) and helper methods
(``self._norm(x.float())``). ``Expr`` pairs an expression with the bindings that were live where it
was written, so a matcher can follow a local name to its value (``resolve``) without rebuilding the
tree: the nodes stay the original ones, and findings keep their positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import libcst as cst

from npu_migrate.migrate.tree import walk  # noqa: F401 (re-exported for the rules)

Env = Mapping[str, "Expr"]


@dataclass(frozen=True, eq=False)
class Expr:
    """An expression and the local bindings live where it was written (compared by identity)."""

    node: cst.BaseExpression
    env: Env = field(default_factory=dict)

    def at(self, node: cst.BaseExpression) -> "Expr":
        """A sub-expression of this one (same bindings)."""
        return Expr(node, self.env)

    def resolve(self) -> "Expr":
        """Follow local names (and parentheses) to the expression they were bound to."""
        expr = self
        for _ in range(100):  # a loose environment (see loose_env) may hold cycles
            node = expr.node
            if not (isinstance(node, cst.Name) and node.value in expr.env):
                break
            expr = expr.env[node.value]
        return expr

    def free_name(self) -> Optional[str]:
        """The name this resolves to when that name is not bound locally (a parameter or global)."""
        node = self.resolve().node
        return node.value if isinstance(node, cst.Name) else None


def same(a: Expr, b: Expr) -> bool:
    """Whether two expressions denote the same value: the same bound node, or equal code whose names
    are bound to the same things."""
    a, b = a.resolve(), b.resolve()
    if a.node is b.node and a.env is b.env:
        return True
    if not a.node.deep_equals(b.node):
        return False
    return all(a.env.get(n) is b.env.get(n) for n in names_in(a.node))


def names_in(node: cst.CSTNode) -> List[str]:
    """Every Name read in ``node`` (attribute names after a dot excluded)."""
    found: List[str] = []

    class _Names(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.append(name.value)

        def visit_Attribute(self, attribute: cst.Attribute) -> bool:
            attribute.value.visit(self)
            return False

        def visit_Arg(self, arg: cst.Arg) -> bool:
            arg.value.visit(self)
            return False

    node.visit(_Names())
    return found


# -- straight-line functions ---------------------------------------------------------------------
def docstring_count(body: Sequence[cst.BaseStatement]) -> int:
    """1 when the block starts with a docstring, else 0."""
    if body and isinstance(body[0], cst.SimpleStatementLine) and len(body[0].body) == 1:
        small = body[0].body[0]
        if isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString)):
            return 1
    return 0


def straight_line(func: cst.FunctionDef, params: Optional[Env] = None) -> Optional[Expr]:
    """The returned value of a function made only of ``name = value`` statements and one final
    ``return value``, with every local resolved; None for anything else (branches, loops, calls
    made for their side effects, tuple targets)."""
    if not isinstance(func.body, cst.IndentedBlock):
        return None
    env: Dict[str, Expr] = dict(params or {})
    statements = list(func.body.body)[docstring_count(func.body.body):]
    for index, stmt in enumerate(statements):
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            return None
        small = stmt.body[0]
        if isinstance(small, cst.Return) and index == len(statements) - 1 and small.value is not None:
            return Expr(small.value, env)
        target = assigned_name(small)
        if target is None:
            return None
        env = {**env, target: Expr(small.value, env)}
    return None


def assigned_name(small: cst.BaseSmallStatement) -> Optional[str]:
    """``name`` for ``name = value`` / ``name: T = value``, else None."""
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        return small.targets[0].target.value
    if isinstance(small, cst.AnnAssign) and small.value is not None and isinstance(small.target, cst.Name):
        return small.target.value
    return None


def param_names(func: cst.FunctionDef) -> List[str]:
    params = func.params
    return [p.name.value for p in (*params.posonly_params, *params.params)]


def loose_env(func: cst.FunctionDef) -> Env:
    """Every ``name = value`` in the function, flow ignored (the last one wins): enough to spot a
    pattern spread over statements in code that is not straight-line, never to rewrite it."""
    env: Dict[str, Expr] = {}
    for node in walk(func.body):
        if isinstance(node, (cst.Assign, cst.AnnAssign)):
            name = assigned_name(node)
            if name is not None and name not in names_in(node.value):
                env[name] = Expr(node.value, env)
    return env


# -- calls ---------------------------------------------------------------------------------------
def bind(call: cst.Call, names: Sequence[str], offset: int = 0) -> Optional[Dict[str, cst.BaseExpression]]:
    """The call's arguments by parameter name (``offset`` skips leading names taken by the method's
    object); None when ``*args``/``**kwargs`` or an unknown keyword make it unclear."""
    bound: Dict[str, cst.BaseExpression] = {}
    position = offset
    for arg in call.args:
        if arg.star:
            return None
        if arg.keyword is None:
            if position >= len(names):
                return None
            bound[names[position]] = arg.value
            position += 1
        else:
            if arg.keyword.value not in names:
                return None
            bound[arg.keyword.value] = arg.value
    return bound


def call_args(node: cst.CSTNode, qualified: Optional[str], functions, method: str,
              params: Sequence[str]) -> Optional[Dict[str, cst.BaseExpression]]:
    """Arguments by parameter name of ``torch.f(a, ...)`` (``qualified``, the qualified name of
    ``node.func``, in ``functions``) or ``a.method(...)``; ``params[0]`` names the tensor."""
    if not isinstance(node, cst.Call):
        return None
    if qualified in functions:
        args = bind(node, params)
    elif qualified is None and isinstance(node.func, cst.Attribute) and node.func.attr.value == method:
        args = bind(node, params, offset=1)
        if args is not None:
            args[params[0]] = node.func.value
    else:
        return None
    return args if args is not None and params[0] in args else None


def number(node: Optional[cst.BaseExpression]) -> Optional[float]:
    """The value of a (possibly negated) int/float literal."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = number(node.expression)
        return None if inner is None else -inner
    if isinstance(node, (cst.Integer, cst.Float)):
        return float(node.evaluated_value)
    return None


def last_dim(node: Optional[cst.BaseExpression]) -> bool:
    """``-1``, ``(-1,)`` or ``[-1]``."""
    if isinstance(node, (cst.Tuple, cst.List)) and len(node.elements) == 1:
        node = node.elements[0].value
    return number(node) == -1


def is_true(node: Optional[cst.BaseExpression]) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def pure_code(expr: Expr, module: cst.Module) -> Optional[str]:
    """Source text for an expression that may be evaluated again elsewhere in the function: a number,
    or an attribute chain rooted at a name that is not bound locally (``self.eps``, ``weight``)."""
    expr = expr.resolve()
    node = expr.node
    if number(node) is not None:
        return module.code_for_node(node)
    if isinstance(node, cst.Attribute):
        inner = pure_code(expr.at(node.value), module)
        return None if inner is None or number(node.value) is not None else f"{inner}.{node.attr.value}"
    if isinstance(node, cst.Name):
        return node.value
    return None


def uses(node: cst.CSTNode, name: str) -> int:
    """How often ``name`` is read in ``node``."""
    return names_in(node).count(name)


def tuple_targets(small: cst.BaseSmallStatement) -> Optional[Tuple[str, ...]]:
    """``(a, b)`` for ``a, b = value`` (plain names only)."""
    if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
        return None
    target = small.targets[0].target
    if not isinstance(target, (cst.Tuple, cst.List)):
        return None
    names = tuple(e.value.value for e in target.elements if isinstance(e.value, cst.Name) and not isinstance(e, cst.StarredElement))
    return names if len(names) == len(target.elements) else None
