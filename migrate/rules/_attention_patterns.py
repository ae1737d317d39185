"""Recognising hand-written attention, shared by NPU302 (rewrite) and NPU303 (report).

Attention is found as a run of statements in one block of a function::

    S = torch.matmul(q, k.transpose(-2, -1)) * scale     # or q @ k.mT / math.sqrt(d), ...
    S = S + mask | S.masked_fill(cond, -inf) | torch.where(keep, S, min)   (optional, also under
                                                          ``if mask is not None:``)
    P = softmax(S, dim=-1[, dtype=torch.float32])[.to(q.dtype)]
    P = dropout(P)                                         (optional: F.dropout or an nn.Dropout)
    O = torch.matmul(P, v)                                 # or P @ v

with GQA through a ``repeat_kv`` helper just before it. :class:`FunctionAnalysis` finds, per run,
either a :class:`Fusion` (everything the fused call needs, as source text) or a :class:`Blocked`
(why the kernel cannot express it, with a plan). Statements in between that do not touch the
scores (``mask_value = ...``) are moved before the run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from npu_migrate.migrate.context import is_guard_test
from npu_migrate.migrate.rules._attention_blockers import (
    Blocked, blocker_in_scores, head_mask, other_score_forms, position_bias, probabilities_used)
from npu_migrate.migrate.rules._attention_definitions import (
    causal_alignment, is_dropout_module, is_repeat_kv, is_tril_buffer, self_attr)
from npu_migrate.migrate.rules._attention_exprs import (
    CASTS, DROPOUT_FN, is_softmax_of, matmul, plain_number, softmax_casts, transposed, very_negative)
from npu_migrate.migrate.rules._later_uses import blocks_of, load_sites_after, loads_after
from npu_migrate.migrate.rules._syntax import (
    Qualify, arg, assign, code, int_value, is_name, method, names_in, parenthesized, reads_only_metadata,
    rename, substitute)
from npu_migrate.migrate.tree import walk


@dataclass
class Fusion:
    block: cst.IndentedBlock
    start: int  # first statement of the run (hoisted repeat_kv included)
    end: int  # the P @ V statement
    hoisted: List[int]  # statements inside the run that do not touch the scores: moved before it
    indent: str  # absolute indentation of the block's statements
    unit: str  # the block's own indentation step
    q: str
    k: str
    v: str
    out: str
    scale: Optional[str] = None
    scale_is_number: bool = True  # a Python number by construction (else the guard checks it is a scalar)
    scale_operand: Optional[str] = None  # the expression the scores are multiplied or divided by
    terms: Dict[str, str] = field(default_factory=dict)  # additive / masked / keep -> expression
    causal: Optional[Tuple[int, str]] = None  # (sparse_mode, buffer slice) when proven causal
    keep_prob: Optional[str] = None
    guards: List[str] = field(default_factory=list)
    probs: Optional[str] = None  # the probabilities' name, set to None on the fused path
    cast_value: bool = False  # P was cast to V's dtype: run the kernel in q's dtype, cast back


class _Run:
    """The state of one candidate run while its statements are read."""

    def __init__(self, start: int, scores: str, q, k, scale):
        self.start, self.cur, self.q, self.k = start, scores, q, k
        self.scale = scale  # (op, expr)
        self.bound: Set[str] = {scores}
        self.hoisted: List[int] = []
        self.terms: Dict[str, cst.BaseExpression] = {}
        self.term_conditions: Dict[str, str] = {}
        self.causal_kind: Dict[str, Tuple[str, int]] = {}  # term kind -> (buffer, mode) when a causal slice
        self.keep_prob: Optional[str] = None
        self.guards: List[str] = []
        self.cast_exprs: List[cst.BaseExpression] = []
        self.probs = False
        self.read: Set[str] = names_in(q) | names_in(k) | (names_in(scale[1]) if scale else set())


class FunctionAnalysis:
    """Attention runs in one function (not in functions nested in it)."""

    def __init__(self, func: cst.FunctionDef, cls: Optional[cst.ClassDef], module: cst.Module,
                 qualify: Qualify, indent: str):
        self.func, self.cls, self.module, self.qualify = func, cls, module, qualify
        self.results: List[object] = []
        params = (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params)
        self.params = {p.name.value for p in params}
        self.numbers = frozenset(p.name.value for p in params if p.annotation is not None
                                 and code(p.annotation.annotation) in ("float", "int"))
        self.assigned = self._assignments()
        self.values = {k: v[0] for k, v in self.assigned.items() if len(v) == 1}
        self._walk(func.body, indent + self._unit(func.body))

    def _unit(self, block) -> str:
        return block.indent if isinstance(block, cst.IndentedBlock) and block.indent is not None else self.module.default_indent

    def _assignments(self) -> Dict[str, List[cst.BaseExpression]]:
        """Every value assigned to each local name (parameters excluded)."""
        found: Dict[str, List[cst.BaseExpression]] = {}
        for node in walk(self.func.body):
            if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
                found.setdefault(node.targets[0].target.value, []).append(node.value)
        return {k: v for k, v in found.items() if k not in self.params}

    def _walk(self, block, indent: str) -> None:
        if not isinstance(block, cst.IndentedBlock):
            return
        i = 0
        while i < len(block.body):
            found = self._run_at(block, i, indent)
            if found is not None:
                self.results.append(found)
                i = (found.end if isinstance(found, Fusion) else i) + 1
                continue
            stmt = block.body[i]
            if isinstance(stmt, cst.If) and is_guard_test(stmt.test):
                i += 1  # already migrated: the else branch is the original code, kept as the fallback
                continue
            if not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                for child in blocks_of(stmt):
                    self._walk(child, indent + self._unit(child))
            i += 1

    # -- one run ----------------------------------------------------------------------------
    def _scores_start(self, stmt) -> Optional[_Run]:
        got = assign(stmt)
        if got is None or got[2] is not None:
            return None
        name, value, _ = got
        scale = None
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, (cst.Multiply, cst.Divide)):
            if matmul(value.left, self.qualify):
                scale, value = ("*" if isinstance(value.operator, cst.Multiply) else "/", value.right), value.left
            elif isinstance(value.operator, cst.Multiply) and matmul(value.right, self.qualify):
                scale, value = ("*", value.left), value.right
        operands = matmul(value, self.qualify)
        if operands is None:
            return None
        k = transposed(operands[1], self.qualify)
        if k is None:
            return None
        return _Run(0, name, operands[0], k, scale)

    def _run_at(self, block: cst.IndentedBlock, i: int, indent: str):
        stmts = block.body
        run = self._scores_start(stmts[i])
        if run is None:
            return other_score_forms(stmts[i], self.func.body, self.qualify)
        run.start = i
        for j in range(i + 1, len(stmts)):
            step = self._step(run, stmts[j], j)
            if isinstance(step, Blocked):
                return step
            if step == "end":
                return self._finish(run, block, j, indent)
            if step is None:
                return None
        return None

    def _step(self, run: _Run, stmt, j: int):
        """Read one statement: "ok", "end" (the P @ V), a Blocked, or None (not attention)."""
        cur, q = run.cur, self.qualify
        if cur not in names_in(stmt) or reads_only_metadata(stmt, cur):
            # a statement beside the attention (`mask_value = ...`): moved before the run when that
            # cannot change what either reads
            got = assign(stmt)
            if got is None or got[2] is not None or got[0] in run.read:
                return None
            if names_in(got[1]) & run.bound:  # reads the scores' dtype or shape: stays in the run
                run.bound.add(got[0])
            else:
                run.hoisted.append(j)
            return "ok"
        run.read |= names_in(stmt)
        if not run.probs:
            blocked = blocker_in_scores(stmt, cur, q)
            if blocked:
                return blocked
        if isinstance(stmt, cst.If):
            return self._conditional(run, stmt)
        got = assign(stmt)
        if got is None:
            return None
        target, value, aug = got
        if aug is not None:
            value = cst.BinaryOperation(cst.Name(cur), _BINARY[type(aug)](), value)
        if not run.probs:
            return self._scores_step(run, target, value, stmt)
        return self._probs_step(run, target, value, stmt)

    def _scores_step(self, run: _Run, target: str, value, stmt):
        cur, q = run.cur, self.qualify
        if target != cur and not is_softmax_of(value, cur, q):
            return None
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, (cst.Multiply, cst.Divide)) \
                and is_name(value.left, cur) and cur not in names_in(value.right) and run.scale is None:
            run.scale = ("*" if isinstance(value.operator, cst.Multiply) else "/", value.right)
            return "ok"
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):
            other = value.right if is_name(value.left, cur) else value.left if is_name(value.right, cur) else None
            if other is None or cur in names_in(other):
                return None
            return self._term(run, "additive", other, stmt)
        fill = method(value, {"masked_fill"})
        if fill and is_name(fill.func.value, cur) and len(fill.args) == 2:
            if not very_negative(fill.args[1].value, q, self.assigned):
                return None
            return self._term(run, "masked", fill.args[0].value, stmt)
        if isinstance(value, cst.Call) and q(value.func) == "torch.where" and len(value.args) == 3 \
                and is_name(value.args[1].value, cur):
            if not very_negative(value.args[2].value, q, self.assigned):
                return None
            return self._term(run, "keep", value.args[0].value, stmt)
        soft = softmax_casts(value, cur, q)
        if soft is not None:
            run.cast_exprs.extend(soft)
            run.probs, run.cur = True, target
            run.bound.add(target)
            return "ok"
        if method(value, CASTS) and is_name(value.func.value, cur):
            return "ok"  # the kernel computes in float32 whatever the input dtype
        return None

    def _term(self, run: _Run, kind: str, expr, stmt, condition: Optional[str] = None, temps=None):
        if kind in run.terms:
            return None
        blocked = position_bias(expr, stmt) if kind == "additive" else None
        if blocked:
            return blocked
        run.terms[kind] = expr
        if condition:
            run.term_conditions[kind] = condition
        causal = self._causal(kind, expr)
        if causal is not None:
            run.causal_kind[kind] = causal
        return "ok"

    def _causal(self, kind: str, expr) -> Optional[Tuple[str, int]]:
        """The (slice code, sparse mode) when the term is a proven lower-triangular buffer slice."""
        if kind == "masked" and isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1 \
                and isinstance(expr.comparisons[0].operator, cst.Equal) and int_value(expr.comparisons[0].comparator) == 0:
            sliced = expr.left
        elif kind == "keep":
            sliced = self.values.get(expr.value) if isinstance(expr, cst.Name) else expr
        else:
            return None
        found = causal_alignment(sliced) if sliced is not None else None
        if found is None or not is_tril_buffer(self.cls, found[0], self.qualify):
            return None
        return code(sliced), found[1]

    def _conditional(self, run: _Run, stmt: cst.If):
        """``if x is not None:`` adding a mask (scores) or multiplying a head mask (probs)."""
        test = stmt.test
        if stmt.orelse is not None or not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
                                           and isinstance(test.comparisons[0].operator, cst.IsNot)
                                           and isinstance(test.comparisons[0].comparator, cst.Name)
                                           and test.comparisons[0].comparator.value == "None"):
            return None
        body = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else ()
        temps: Dict[str, cst.BaseExpression] = {}
        for inner in body[:-1]:
            got = assign(inner)
            if got is None or got[2] is not None or run.cur in names_in(got[1]):
                return None
            temps[got[0]] = got[1]
        got = assign(body[-1]) if body else None
        if got is None or got[0] != run.cur:
            return None
        target, value, aug = got
        if aug is not None:
            value = cst.BinaryOperation(cst.Name(run.cur), _BINARY[type(aug)](), value)
        if not isinstance(value, cst.BinaryOperation):
            return None
        other = value.right if is_name(value.left, run.cur) else value.left if is_name(value.right, run.cur) else None
        if other is None:
            return None
        run.bound.update(temps)
        if not run.probs and isinstance(value.operator, cst.Add):
            expr = substitute(other, temps)
            return self._term(run, "additive", expr, body[-1], condition=code(test), temps=temps)
        if run.probs and isinstance(value.operator, cst.Multiply) and not temps:
            run.guards.append(f"{code(test.left)} is None")
            return "ok"
        return None

    def _probs_step(self, run: _Run, target: str, value, stmt):
        cur, q = run.cur, self.qualify
        operands = matmul(value, q)
        if operands is not None and is_name(operands[0], cur):
            if cur in names_in(operands[1]):
                return None
            run.v, run.out = operands[1], target
            return "end"
        if target != cur:
            return None
        if method(value, CASTS) and is_name(value.func.value, cur):
            run.cast_exprs.append(value)
            return "ok"
        if isinstance(value, cst.Call) and len(value.args) >= 1 and is_name(value.args[0].value, cur) and run.keep_prob is None:
            if q(value.func) in DROPOUT_FN:
                p = arg(value, 1, "p")
                training = arg(value, 2, "training")
                p_code = code(p) if p is not None else "0.5"
                run.keep_prob = f"1 - {p_code}" if training is None else f"1 - {p_code} if {code(training)} else 1.0"
                return "ok"
            attr = self_attr(value.func)
            if attr and len(value.args) == 1 and is_dropout_module(self.cls, attr, q):
                run.keep_prob = f"1 - self.{attr}.p if self.{attr}.training else 1.0"
                return "ok"
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply) \
                and (is_name(value.left, cur) or is_name(value.right, cur)):
            return head_mask(stmt)
        return None

    # -- after the run ----------------------------------------------------------------------
    def _finish(self, run: _Run, block: cst.IndentedBlock, end: int, indent: str):
        stmts = block.body
        if not all(isinstance(x, cst.Name) for x in (run.q, run.k, run.v)):
            return None
        q, k, v = run.q.value, run.k.value, run.v.value
        run.bound.add(run.out)
        later = loads_after(self.func.body, stmts[end])
        start = run.start
        # GQA: `k2 = repeat_kv(k, n)` / `v2 = repeat_kv(v, n)` just before become the kernel's own GQA
        repeats = self._repeat_kv(stmts, start, {k, v})
        hoisted_names = set().union(*(names_in(stmts[h]) for h in run.hoisted)) if run.hoisted else set()
        if repeats and not (set(repeats) & (later | hoisted_names)) and self._key_uses_ok(run, k):
            start -= len(repeats)
            subst = repeats
            k, v = repeats.get(k, k), repeats.get(v, v)
        else:
            subst = {}
        probs = None
        for name in run.bound - {run.out}:
            if name not in later:
                continue
            if name != run.cur:
                return None
            guard = self._probs_guard(name, stmts[end])
            if isinstance(guard, Blocked):
                return guard
            run.guards.append(guard)
            probs = name
        cast_value = any(v_name in names_in(c) for c in run.cast_exprs for v_name in {run.v.value, v}) \
            and not any(run.q.value in names_in(c) for c in run.cast_exprs)
        fusion = Fusion(block, start, end, [h for h in run.hoisted], indent, self._unit(block), q, k, v, run.out,
                        keep_prob=run.keep_prob, guards=run.guards, probs=probs, cast_value=cast_value)
        if run.scale is not None:
            op, expr = run.scale
            expr = expr.with_changes(lpar=[], rpar=[]) if hasattr(expr, "lpar") else expr
            fusion.scale = code(expr) if op == "*" else f"1 / {parenthesized(expr)}"
            fusion.scale_is_number = plain_number(expr, self.qualify, self.values, numbers=self.numbers)
            fusion.scale_operand = code(expr)
        for kind, expr in run.terms.items():
            text = code(rename(expr, subst))
            condition = run.term_conditions.get(kind)
            if condition and text != condition.split(" is not ")[0]:
                text = f"{text} if {condition} else None"
            fusion.terms[kind] = text
        if len(run.terms) == 1 and run.causal_kind:
            (slice_code, mode), = run.causal_kind.values()
            fusion.terms, fusion.causal = {}, (mode, slice_code)
        return fusion

    def _key_uses_ok(self, run: _Run, key_name: str) -> bool:
        """The repeated key appears in masks only as its sequence length (the same for the original)."""
        allowed = {f"{key_name}.shape[-2]", f"{key_name}.shape[2]", f"{key_name}.size(-2)", f"{key_name}.size(2)"}
        for expr in run.terms.values():
            text = code(expr)
            uses = len(re.findall(rf"\b{re.escape(key_name)}\b", text))
            if uses != sum(text.count(a) for a in allowed):
                return False
        return True

    def _repeat_kv(self, stmts, start: int, names: Set[str]) -> Dict[str, str]:
        """``{repeated: original}`` for the proven ``x = repeat_kv(y, n)`` statements just before ``start``."""
        found = {}
        for stmt in reversed(stmts[max(0, start - 2):start]):
            got = assign(stmt)
            call = got[1] if got is not None and got[2] is None else None
            if not (isinstance(call, cst.Call) and got[0] in names and isinstance(call.func, cst.Name)
                    and call.func.value == "repeat_kv" and call.args and isinstance(call.args[0].value, cst.Name)
                    and is_repeat_kv(self.module, self.qualify, call.func)):
                break
            found[got[0]] = call.args[0].value.value
        return found

    def _probs_guard(self, name: str, end_stmt) -> object:
        """A run-time condition under which the probabilities are not used, or Blocked."""
        uses = load_sites_after(self.func.body, end_stmt, name)
        flags = set()
        for chain in uses:
            flag = next((t for t in chain if t in self.params), None)
            if flag is None:
                break
            flags.add(flag)
        else:
            if len(flags) == 1:
                return f"not {flags.pop()}"
        returned = all(chain == ("<return>",) for chain in uses)
        params = self.func.params
        star = params.star_kwarg.name.value if isinstance(params.star_kwarg, cst.Param) else None
        first = params.params[0].name.value if params.params else None
        if returned and star and first == "module":
            return f"not npu_glue.attention_weights_requested({first}, {star})"
        return probabilities_used(end_stmt, name)


_BINARY = {cst.AddAssign: cst.Add, cst.MultiplyAssign: cst.Multiply, cst.DivideAssign: cst.Divide,
           cst.SubtractAssign: cst.Subtract}
