"""Recognising a hand-written RMSNorm body (for the NPU320/NPU321 rule in ``rms_norm``).

``NormMatcher`` reads what a straight-line function returns as
``x * rsqrt(mean(x², -1, keepdim=True) + eps)`` times an optional weight (or Gemma's
``1 + weight``), following locals and ``self.method(...)`` helpers of the same class, through the
spellings and casts listed in ``rms_norm``'s docstring. ``norm`` gives the ``Norm`` the fused kernel
reproduces or raises ``Mismatch`` with the reason it does not; ``core`` finds the inverse-RMS
expression of a function that did not match, for the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import libcst as cst

from npu_migrate.migrate.rules._dataflow import (
    Env, Expr, assigned_name, bind, call_args, is_true, last_dim, loose_env, number, param_names, pure_code, same,
    straight_line, walk,
)

FLOAT32 = ("torch.float32", "torch.float")
HALF = ("torch.float16", "torch.half")
GENERIC = "not of the form x * rsqrt(mean(x**2, -1, keepdim=True) + eps) * weight"

Qualify = Callable[[cst.CSTNode], Optional[str]]


class Mismatch(Exception):
    """The function is not an RMSNorm the kernel reproduces; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Norm:
    x: str  # the parameter that is normalised
    weight: Optional[Expr]
    eps: Expr
    gemma: bool


class NormMatcher:
    """Matches the functions of one file (``module``) against the RMSNorm forms; ``methods`` are
    the methods of the enclosing class (followed as ``self.name(...)``), ``inlined`` collects the
    names of those a match read through."""

    def __init__(self, qualify: Qualify, module: cst.Module, methods: Dict[str, cst.FunctionDef]) -> None:
        self.qualify = qualify
        self.module = module
        self.methods = methods
        self.inlined: List[str] = []

    def core(self, func: cst.FunctionDef) -> Optional[cst.CSTNode]:
        """The first inverse-RMS expression (rsqrt/pow(-0.5)/sqrt of ``mean(x²) + eps``, over any
        dims) in ``func``, locals followed through every simple assignment in the function."""
        env = loose_env(func)
        for node in walk(func.body):
            if isinstance(node, (cst.Call, cst.BinaryOperation)):
                try:
                    if self._inv_rms(Expr(node, env), strict=False) is not None:
                        return node
                except Mismatch:
                    return node
        return None

    def _value(self, expr: Expr) -> Expr:
        """``expr`` with locals resolved and ``self.method(args)`` calls replaced by what the method
        returns (a straight-line method of the same class)."""
        expr = expr.resolve()
        node = expr.node
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and isinstance(node.func.value, cst.Name):
            method = self.methods.get(node.func.attr.value)
            if method is not None and node.func.value.value == "self" and "self" not in expr.env:
                names = param_names(method)
                args = bind(node, names, offset=1)
                if args is not None and len(args) == len(names) - 1:
                    params: Env = {n: Expr(v, expr.env) for n, v in args.items()}
                    result = self.returned(method, params)
                    if result is not None:
                        self.inlined.append(method.name.value)
                        return self._value(result)
        return expr

    def returned(self, func: cst.FunctionDef, params: Optional[Env] = None) -> Optional[Expr]:
        """``straight_line`` with each ``_half_cast`` branch read as the cast it holds."""
        if not isinstance(func.body, cst.IndentedBlock):
            return None
        body = [self._half_cast(stmt) or stmt for stmt in func.body.body]
        return straight_line(func.with_changes(body=func.body.with_changes(body=body)), params)

    def _half_cast(self, stmt: cst.BaseStatement) -> Optional[cst.SimpleStatementLine]:
        """The ``y = y.to(w.dtype)`` of ``if w.dtype in [torch.float16, torch.bfloat16, ...]:`` (T5).
        ``norm`` accepts a cast to ``w.dtype`` only when ``w`` is the weight, so the fast path's
        guard holds w.dtype == x.dtype in {float16, bfloat16, float32}: the branch runs for half x and
        casts to x's dtype, and is skipped only for float32 x, whose normalised value is float32
        already. Either way it is the unconditional cast to x's dtype."""
        if not (isinstance(stmt, cst.If) and stmt.orelse is None and len(stmt.body.body) == 1):
            return None
        test, inner = stmt.test, stmt.body.body[0]
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
                and isinstance(test.comparisons[0].operator, cst.In)
                and isinstance(test.left, cst.Attribute) and test.left.attr.value == "dtype"):
            return None
        dtypes = test.comparisons[0].comparator
        if not isinstance(dtypes, (cst.List, cst.Tuple, cst.Set)):
            return None
        names = {self.qualify(e.value) for e in dtypes.elements}
        if not (names & set(HALF) and "torch.bfloat16" in names):
            return None
        if not (isinstance(inner, cst.SimpleStatementLine) and len(inner.body) == 1):
            return None
        name, value = assigned_name(inner.body[0]), getattr(inner.body[0], "value", None)
        if not (name is not None and isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
                and value.func.attr.value == "to" and isinstance(value.func.value, cst.Name)
                and value.func.value.value == name and len(value.args) == 1 and value.args[0].keyword is None
                and value.args[0].value.deep_equals(test.left)):
            return None
        return inner

    def norm(self, result: Expr, func: cst.FunctionDef) -> Norm:
        value, outer_cast = self._cast_back(result)
        operand, eps, inner_cast, multipliers = self._split(self._factors(value))
        weight, gemma, weight_upcast = None, False, False
        if len(multipliers) == 1:
            weight, gemma, weight_upcast = self._weight(multipliers[0])
        elif multipliers:
            codes = " * ".join(f"`{self.module.code_for_node(m.node)}`" for m in multipliers)
            raise Mismatch(f"the norm is multiplied by {codes}: more than one weight (a gated or scaled norm?)")
        x, upcast = self._input(operand, func)
        for cast in (outer_cast, inner_cast):  # the guard makes the weight's dtype x's
            if cast is not None and cast.free_name() != x and not (weight is not None and same(cast, weight)):
                raise Mismatch("the result is cast to a dtype other than the input's")
        if outer_cast is not None and inner_cast is not None:
            raise Mismatch("the result is cast back twice")
        if upcast and outer_cast is None and inner_cast is None:
            raise Mismatch("x is normalised in float32 and never cast back, but the fused kernel returns x's dtype")
        if weight_upcast and outer_cast is None:
            raise Mismatch("the weight is applied in float32 and the result is not cast back")
        if pure_code(eps, self.module) is None:
            raise Mismatch("eps is not a constant, a parameter or an attribute")
        return Norm(x, weight, eps, gemma)

    def _split(self, factors: List[Expr]) -> Tuple[Expr, Expr, Optional[Expr], List[Expr]]:
        """The normalised part of a product (one factor, or the pair ``x * inv_rms``) and the other
        factors: (operand, eps, cast-back dtype source, other factors)."""
        reason = None
        groups = [[i] for i in range(len(factors))]
        groups += [[i, j] for i in range(len(factors)) for j in range(i + 1, len(factors))]
        for group in groups:
            try:
                operand, eps, cast = self._normalized([factors[i] for i in group])
            except Mismatch as exc:
                reason = exc.reason if exc.reason != GENERIC else reason
                continue
            return operand, eps, cast, [f for i, f in enumerate(factors) if i not in group]
        raise Mismatch(reason or GENERIC)

    def _weight(self, expr: Expr) -> Tuple[Expr, bool, bool]:
        """(weight, is Gemma's ``1 + weight``, weight cast to float32)."""
        value = self._value(expr)
        node = value.node
        gemma = False
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            for one, other in ((node.left, node.right), (node.right, node.left)):
                if number(one) == 1:
                    value, gemma = self._value(value.at(other)), True
                    break
        value, upcast = self._upcast(value)
        if pure_code(value, self.module) is None or number(value.node) is not None:
            code = self.module.code_for_node(expr.node)
            raise Mismatch(f"the norm is multiplied by `{code}`, not by a weight parameter (a gated norm?)")
        return value, gemma, upcast

    def _input(self, operand: Expr, func: cst.FunctionDef) -> Tuple[str, bool]:
        value, upcast = self._upcast(self._value(operand))
        name = value.free_name()
        if name is None or name not in param_names(func) or name == "self":
            node = value.node
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract):
                raise Mismatch("the mean is subtracted first (a LayerNorm-style norm, not RMSNorm)")
            raise Mismatch(f"normalises `{self.module.code_for_node(node)}`, not a parameter of the function")
        return name, upcast

    def _normalized(self, factors: List[Expr]) -> Tuple[Expr, Expr, Optional[Expr]]:
        """(operand, eps, cast-back dtype source) for ``operand * inv_rms(operand)``, the product cast
        back to a dtype, or ``operand / sqrt(mean(operand²) + eps)``."""
        if len(factors) == 1:
            value, cast = self._cast_back(factors[0])
            if cast is not None:
                operand, eps, inner = self._normalized(self._factors(value))
                if inner is not None:
                    raise Mismatch("the result is cast back twice")
                return operand, eps, cast
            node = value.node
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide):
                found = self._sqrt_of_ms(value.at(node.right))
                operand = self._operand(found, value.at(node.left))
                if operand is not None:
                    return operand, found[1], None
        elif len(factors) == 2:
            for operand, inv in (factors, factors[::-1]):
                found = self._inv_rms(inv)
                operand = self._operand(found, operand)
                if operand is not None:
                    return operand, found[1], None
        raise Mismatch(GENERIC)

    def _operand(self, found: Optional[Tuple[Expr, Expr]], scaled: Expr) -> Optional[Expr]:
        """What is normalised when ``scaled`` is multiplied (or divided) by the inverse RMS of
        ``found[0]``: ``scaled`` when both are the same value; the float32 ``found[0]`` when it is
        ``scaled`` cast to float32 (T5), as the product with the float32 inverse RMS promotes
        ``scaled`` to float32 exactly."""
        if found is None:
            return None
        squared, scaled = self._value(found[0]), self._value(scaled)
        if same(squared, scaled):
            return scaled
        inner, upcast = self._upcast(squared)
        return squared if upcast and same(inner, scaled) else None

    def _factors(self, expr: Expr) -> List[Expr]:
        """The operands of a chain of ``*`` (locals followed)."""
        value = self._value(expr)
        node = value.node
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
            return self._factors(value.at(node.left)) + self._factors(value.at(node.right))
        return [value]

    # -- the inverse RMS ----------------------------------------------------------------------
    def _inv_rms(self, expr: Expr, strict: bool = True) -> Optional[Tuple[Expr, Expr]]:
        """(operand, eps) for ``rsqrt(V)``, ``V.pow(-0.5)``, ``V ** -0.5``, ``1 / sqrt(V)`` with
        ``V = mean(operand²) + eps``; ``strict`` raises Mismatch when the mean is not over the
        last dim with keepdim."""
        value = self._value(expr)
        node = value.node
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, cst.Power) and number(node.right) == -0.5:
                return self._ms_plus_eps(value.at(node.left), strict)
            if isinstance(node.operator, cst.Divide) and number(node.left) == 1:
                return self._sqrt_of_ms(value.at(node.right), strict)
            return None
        call = self._call(value, ("torch.rsqrt",), "rsqrt", ("input",))
        if call is not None:
            return self._ms_plus_eps(call["input"], strict)
        call = self._call(value, ("torch.pow",), "pow", ("input", "exponent"))
        if call is not None and "exponent" in call and number(call["exponent"].node) == -0.5:
            return self._ms_plus_eps(call["input"], strict)
        return None

    def _sqrt_of_ms(self, expr: Expr, strict: bool = True) -> Optional[Tuple[Expr, Expr]]:
        call = self._call(self._value(expr), ("torch.sqrt",), "sqrt", ("input",))
        return self._ms_plus_eps(call["input"], strict) if call is not None else None

    def _ms_plus_eps(self, expr: Expr, strict: bool) -> Optional[Tuple[Expr, Expr]]:
        value = self._value(expr)
        node = value.node
        if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add)):
            return None
        for ms, eps in ((node.left, node.right), (node.right, node.left)):
            operand = self._mean_square(value.at(ms), strict)
            if operand is not None:
                return operand, value.at(eps)
        return None

    def _mean_square(self, expr: Expr, strict: bool) -> Optional[Expr]:
        call = self._call(self._value(expr), ("torch.mean",), "mean", ("input", "dim", "keepdim"))
        square = self._square(call["input"]) if call is not None else None
        if square is None or not strict:
            return square
        dim, keepdim = call.get("dim"), call.get("keepdim")
        if dim is None or not last_dim(dim.node):
            raise Mismatch("the mean runs over dims other than the last one")
        if keepdim is None or not is_true(keepdim.node):
            raise Mismatch("the mean is taken without keepdim=True")
        return square

    def _square(self, expr: Expr) -> Optional[Expr]:
        value = self._value(expr)
        node = value.node
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, cst.Power) and number(node.right) == 2:
                return value.at(node.left)
            if isinstance(node.operator, cst.Multiply) and same(value.at(node.left), value.at(node.right)):
                return value.at(node.left)
            return None
        call = self._call(value, ("torch.square",), "square", ("input",))
        if call is not None:
            return call["input"]
        call = self._call(value, ("torch.pow",), "pow", ("input", "exponent"))
        if call is not None and "exponent" in call and number(call["exponent"].node) == 2:
            return call["input"]
        return None

    # -- casts --------------------------------------------------------------------------------
    def _upcast(self, expr: Expr) -> Tuple[Expr, bool]:
        """(inner, True) for ``e.float()``, ``e.to(torch.float32)``, ``e.type(torch.float32)``."""
        node = expr.node
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            method, inner = node.func.attr.value, expr.at(node.func.value)
            if method == "float" and not node.args:
                return self._value(inner), True
            if method in ("to", "type") and len(node.args) == 1:
                arg = node.args[0]
                if arg.keyword is None or arg.keyword.value in ("dtype",):
                    if self.qualify(arg.value) in FLOAT32:
                        return self._value(inner), True
        return expr, False

    def _cast_back(self, expr: Expr) -> Tuple[Expr, Optional[Expr]]:
        """(inner, the tensor whose dtype it is cast to) for ``e.to(v)`` with ``v = x.dtype``,
        ``e.to(x.dtype)`` and ``e.type_as(x)``; (expr, None) otherwise."""
        value = self._value(expr)
        node = value.node
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and len(node.args) == 1:
            method, arg = node.func.attr.value, node.args[0]
            inner = value.at(node.func.value)
            if method == "type_as" and arg.keyword is None:
                return inner, self._value(value.at(arg.value))
            if method == "to" and (arg.keyword is None or arg.keyword.value == "dtype"):
                dtype = self._value(value.at(arg.value))
                if isinstance(dtype.node, cst.Attribute) and dtype.node.attr.value == "dtype":
                    return inner, self._value(dtype.at(dtype.node.value))
        return value, None

    def _call(self, expr: Expr, functions, method: str, params) -> Optional[Dict[str, Expr]]:
        """``torch.f(a, ...)`` (a qualified name in ``functions``) or ``a.method(...)``, its arguments
        by parameter name (``params[0]`` names the tensor)."""
        node = expr.node
        if not isinstance(node, cst.Call):
            return None
        args = call_args(node, self.qualify(node.func), functions, method, params)
        return None if args is None else {k: expr.at(v) for k, v in args.items()}
