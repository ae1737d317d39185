"""Recognising hand-written attention, shared by NPU302 (rewrite) and NPU303 (report).

Attention is found as a run of statements in one block of a function::

    S = torch.matmul(q, k.transpose(-2, -1)) * scale     # or q @ k.mT / math.sqrt(d), ...
    S = S + mask | S.masked_fill(cond, -inf) | torch.where(keep, S, min)   (optional, also under
                                                          ``if mask is not None:``)
    P = softmax(S, dim=-1[, dtype=torch.float32])[.to(q.dtype)]
    P = dropout(P)                                         (optional: F.dropout or an nn.Dropout)
    O = torch.matmul(P, v)                                 # or P @ v

with GQA through a ``repeat_kv`` helper just before it. :func:`analyse_function` returns, per run,
either a :class:`Fusion` (everything the fused call needs, as source text) or a :class:`Blocked`
(why the kernel cannot express it, with a plan). Statements in between that do not touch the
scores (``mask_value = ...``) are moved before the run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Set, Tuple

import libcst as cst
import libcst.matchers as m

from migrate.tree import walk
from opmap import Fallback

Qualify = Callable[[cst.CSTNode], Optional[str]]

SOFTMAX = {"torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax"}
MATMUL = {"torch.matmul"}
DROPOUT_FN = {"torch.nn.functional.dropout"}
DROPOUT_MODULE = {"torch.nn.Dropout", "torch.nn.modules.dropout.Dropout"}
CASTS = {"to", "type_as", "float", "half", "bfloat16", "type"}
BIAS_NAME = re.compile(r"bias|position|alibi|pse|rel", re.I)
_CODE = cst.Module(body=[])


def code(node: cst.CSTNode) -> str:
    return _CODE.code_for_node(node)


@dataclass
class Blocked:
    node: cst.CSTNode
    reason: str
    fallback: Fallback


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
    terms: Dict[str, str] = field(default_factory=dict)  # additive / masked / keep -> expression
    causal: Optional[Tuple[int, str]] = None  # (sparse_mode, buffer slice) when proven causal
    keep_prob: Optional[str] = None
    guards: List[str] = field(default_factory=list)
    probs: Optional[str] = None  # the probabilities' name, set to None on the fused path
    cast_value: bool = False  # P was cast to V's dtype: run the kernel in q's dtype, cast back


# ------------------------------------------------------------------------------ small matchers

def assign(stmt: cst.CSTNode) -> Optional[Tuple[str, cst.BaseExpression, Optional[cst.BaseAugOp]]]:
    """``name = value`` or ``name op= value`` as (name, value, op), else None."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        return small.targets[0].target.value, small.value, None
    if isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
        return small.target.value, small.value, small.operator
    return None


def names_in(node: cst.CSTNode) -> Set[str]:
    return {n.value for n in walk(node) if isinstance(n, cst.Name)}


def is_name(node: cst.CSTNode, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def _int(node: cst.CSTNode) -> Optional[int]:
    if isinstance(node, cst.Integer):
        return int(node.value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and isinstance(node.expression, cst.Integer):
        return -int(node.expression.value)
    return None


def arg(call: cst.Call, index: int, keyword: str) -> Optional[cst.BaseExpression]:
    for a in call.args:
        if a.keyword is not None and a.keyword.value == keyword:
            return a.value
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return positional[index].value if index < len(positional) else None


def method(node: cst.CSTNode, names) -> Optional[cst.Call]:
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in names:
        return node
    return None


def transposed(node: cst.CSTNode, qualify: Qualify) -> Optional[cst.BaseExpression]:
    """``k`` from ``k.transpose(-2, -1)``, ``k.transpose(2, 3)``, ``k.mT``, ``torch.transpose(k, -1, -2)``."""
    if isinstance(node, cst.Attribute) and node.attr.value == "mT":
        return node.value
    if not isinstance(node, cst.Call):
        return None
    if method(node, {"transpose"}) and len(node.args) == 2:
        base, dims = node.func.value, [_int(a.value) for a in node.args]
    elif qualify(node.func) == "torch.transpose" and len(node.args) == 3:
        base, dims = node.args[0].value, [_int(a.value) for a in node.args[1:]]
    else:
        return None
    return base if sorted(d for d in dims if d is not None) in ([-2, -1], [2, 3]) and None not in dims else None


def matmul(node: cst.CSTNode, qualify: Qualify) -> Optional[Tuple[cst.BaseExpression, cst.BaseExpression]]:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        return node.left, node.right
    if isinstance(node, cst.Call) and qualify(node.func) in MATMUL and len(node.args) == 2:
        return node.args[0].value, node.args[1].value
    return None


def very_negative(node: cst.CSTNode, qualify: Qualify, values: Dict[str, List[cst.BaseExpression]],
                  seen: frozenset = frozenset()) -> bool:
    """``float('-inf')``, ``-math.inf``, ``torch.finfo(t).min``, or a ``torch.tensor`` of one, or a
    name every assignment of which is one of these."""
    if isinstance(node, cst.Name) and node.value in values:
        if node.value in seen:
            return True
        return all(very_negative(v, qualify, values, seen | {node.value}) for v in values[node.value])
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = node.expression
        if qualify(inner) in ("math.inf", "torch.inf", "numpy.inf"):
            return True
        return isinstance(inner, cst.Call) and code(inner.func) == "float" and _string(inner) == "inf"
    if isinstance(node, cst.Call) and code(node.func) == "float":
        return _string(node) in ("-inf", "-infinity")
    if isinstance(node, cst.Attribute) and node.attr.value == "min" and isinstance(node.value, cst.Call):
        return qualify(node.value.func) == "torch.finfo"
    if isinstance(node, cst.Call) and qualify(node.func) in ("torch.tensor", "torch.full_like") and node.args:
        return very_negative(node.args[-1 if qualify(node.func) == "torch.full_like" else 0].value, qualify, values, seen)
    return False


def _string(call: cst.Call) -> Optional[str]:
    if len(call.args) == 1 and isinstance(call.args[0].value, cst.SimpleString):
        value = call.args[0].value.evaluated_value
        return value.lower() if isinstance(value, str) else None
    return None


def plain_number(node: cst.CSTNode, qualify: Qualify) -> bool:
    """An expression that is a Python number (so ``scale=`` takes it as is)."""
    if isinstance(node, (cst.Integer, cst.Float, cst.Name)):
        return True
    if isinstance(node, cst.UnaryOperation):
        return plain_number(node.expression, qualify)
    if isinstance(node, cst.BinaryOperation):
        return plain_number(node.left, qualify) and plain_number(node.right, qualify)
    if isinstance(node, cst.Call):
        name = qualify(node.func) or ""
        return name.startswith("math.") or bool(method(node, {"size"}))
    if isinstance(node, cst.Subscript):
        return isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape"
    return False


# ------------------------------------------------------------------------------ class facts

def _class_assignments(cls: Optional[cst.ClassDef], attr: str) -> List[cst.BaseExpression]:
    """Every value assigned to ``self.<attr>`` (or registered as buffer ``attr``) in the class."""
    if cls is None:
        return []
    found = []
    for node in m.findall(cls, m.Assign(targets=[m.AssignTarget(target=m.Attribute(value=m.Name("self"), attr=m.Name(attr)))])):
        found.append(node.value)
    for call in m.findall(cls, m.Call(func=m.Attribute(attr=m.Name("register_buffer")))):
        if len(call.args) >= 2 and isinstance(call.args[0].value, cst.SimpleString) and call.args[0].value.evaluated_value == attr:
            found.append(call.args[1].value)
    return found


def _self_attr(node: cst.CSTNode) -> Optional[str]:
    if isinstance(node, cst.Attribute) and is_name(node.value, "self"):
        return node.attr.value
    return None


def is_tril_buffer(cls: Optional[cst.ClassDef], attr: str, qualify: Qualify) -> bool:
    """Every assignment of ``self.<attr>`` is ``torch.tril(torch.ones(...))`` (views/casts allowed)."""
    values = _class_assignments(cls, attr)

    def tril_of_ones(value) -> bool:
        for call in m.findall(value, m.Call()):
            if qualify(call.func) == "torch.tril" and call.args and isinstance(call.args[0].value, cst.Call) \
                    and qualify(call.args[0].value.func) == "torch.ones":
                return True
            if method(call, {"tril"}) and isinstance(call.func.value, cst.Call) and qualify(call.func.value.func) == "torch.ones":
                return True
        return False

    return bool(values) and all(tril_of_ones(v) for v in values)


def is_dropout_module(cls: Optional[cst.ClassDef], attr: str, qualify: Qualify) -> bool:
    values = _class_assignments(cls, attr)
    return bool(values) and all(isinstance(v, cst.Call) and qualify(v.func) in DROPOUT_MODULE for v in values)


def causal_alignment(node: cst.CSTNode) -> Optional[Tuple[str, int]]:
    """(buffer attr, sparse mode) for ``self.buf[:, :, :A, :B]`` (top-left: 2) or
    ``self.buf[:, :, K - Q:K, :K]`` (bottom-right: 3)."""
    if not isinstance(node, cst.Subscript) or _self_attr(node.value) is None or len(node.slice) != 4:
        return None
    parts = [e.slice for e in node.slice]
    if not all(isinstance(p, cst.Slice) and p.step is None for p in parts):
        return None
    if any(p.lower is not None or p.upper is not None for p in parts[:2]):
        return None
    rows, cols = parts[2], parts[3]
    if cols.lower is not None or cols.upper is None or rows.upper is None:
        return None
    if rows.lower is None:
        return _self_attr(node.value), 2
    lower = rows.lower
    if isinstance(lower, cst.BinaryOperation) and isinstance(lower.operator, cst.Subtract) \
            and code(lower.left) == code(rows.upper) == code(cols.upper):
        return _self_attr(node.value), 3
    return None


# ------------------------------------------------------------------------------ the analysis

def _fallback_pse(what: str) -> Fallback:
    return Fallback("custom-kernel", (
        f"{what} is added to the scores inside the softmax. npu_fusion_attention takes such a bias as "
        "`pse` (pse_type=1 computes scale*(QK^T + pse), so pass the bias divided by the scale, or use "
        "npu_fusion_attention_v2 with pse_type=0 for scale*QK^T + pse) after checking its shape is "
        "BNSS, BN1Skv or 1NSS; until then the eager code runs (composite)."))


def _blocker_in_scores(stmt: cst.CSTNode, cur: str, qualify: Qualify) -> Optional[Blocked]:
    for call in m.findall(stmt, m.Call()):
        if qualify(call.func) == "torch.tanh" or method(call, {"tanh"}):
            return Blocked(stmt, "logit soft-capping (tanh(x / cap) * cap) before the softmax has no fused form",
                           Fallback("composite", "keep the eager attention (the fused kernel has no soft-cap); "
                                    "a custom kernel (TileLang-Ascend / Ascend C) could fuse it"))
        if qualify(call.func) == "torch.cat" and cur in names_in(call):
            return Blocked(stmt, "attention sinks (an extra logit column concatenated to the scores)",
                           Fallback("manual", "npu_fusion_attention's `sink` argument (float32 [head_num], needs a "
                                    "recent CANN) computes per-head sinks: pass the sink logits there and drop "
                                    "the concatenation, then check parity; until then the eager code runs"))
    return None


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
        self.params = {p.name.value for p in (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params)}
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
            if isinstance(stmt, cst.If) and "npu_glue" in names_in(stmt.test):
                i += 1  # already migrated: the else branch is the original code, kept as the fallback
                continue
            if not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                for child in _blocks_of(stmt):
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
            return self._other_forms(stmts, i)
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
        if cur not in names_in(stmt) or _reads_only_metadata(stmt, cur):
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
            blocked = _blocker_in_scores(stmt, cur, q)
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
        if target != cur and not _is_softmax_of(value, cur, q):
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
        soft = _softmax(value, cur, q)
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
        if kind == "additive" and BIAS_NAME.search(code(expr)):
            return Blocked(stmt, f"a position bias ({code(expr)}) is added to the scores",
                           _fallback_pse(f"`{code(expr)}`"))
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
                and isinstance(expr.comparisons[0].operator, cst.Equal) and _int(expr.comparisons[0].comparator) == 0:
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
            expr = _substitute(other, temps)
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
            attr = _self_attr(value.func)
            if attr and len(value.args) == 1 and is_dropout_module(self.cls, attr, q):
                run.keep_prob = f"1 - self.{attr}.p if self.{attr}.training else 1.0"
                return "ok"
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply) \
                and (is_name(value.left, cur) or is_name(value.right, cur)):
            return Blocked(stmt, "the attention probabilities are multiplied by a head mask",
                           Fallback("composite", "keep the eager attention, or apply the head mask to the output "
                                    "per head when it is a per-head scalar (it then commutes with P @ V)"))
        return None

    # -- after the run ----------------------------------------------------------------------
    def _finish(self, run: _Run, block: cst.IndentedBlock, end: int, indent: str):
        stmts = block.body
        if not all(isinstance(x, cst.Name) for x in (run.q, run.k, run.v)):
            return None
        q, k, v = run.q.value, run.k.value, run.v.value
        run.bound.add(run.out)
        later = _loads_after(self.func.body, stmts[end])
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
            text = code(expr) if op == "*" else f"1 / {_paren(expr)}"
            fusion.scale = text if plain_number(expr, self.qualify) else f"float({text})"
        for kind, expr in run.terms.items():
            text = code(_rename(expr, subst))
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
                    and _is_repeat_kv(self.module, self.qualify, call.func)):
                break
            found[got[0]] = call.args[0].value.value
        return found

    def _probs_guard(self, name: str, end_stmt) -> object:
        """A run-time condition under which the probabilities are not used, or Blocked."""
        uses = _load_sites_after(self.func.body, end_stmt, name)
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
        return Blocked(end_stmt, f"the attention probabilities `{name}` are used after the product with V "
                       "(returned or consumed); the fused kernel does not form them",
                       Fallback("composite", "keep the eager attention where the probabilities are needed; "
                                "fuse only the path that discards them (e.g. under `if not output_attentions:`)"))

    def _other_forms(self, stmts, i: int):
        """Score forms the rule does not prove: einsum and ALiBi's baddbmm, when a softmax follows."""
        got = assign(stmts[i])
        if got is None or not isinstance(got[1], cst.Call):
            return None
        name, call = got[0], got[1]
        func = self.qualify(call.func) or ""
        alibi = func == "torch.baddbmm" or (method(call, {"baddbmm"}) is not None)
        einsum = func == "torch.einsum"
        if not (alibi or einsum):
            return None
        if not any(_softmax_in(s, name, self.qualify) for s in stmts[i + 1:i + 6]):
            return None
        if alibi:
            return Blocked(stmts[i], "ALiBi-style scores (baddbmm of a bias with Q and K^T)", _fallback_pse("the ALiBi bias"))
        return Blocked(stmts[i], "attention scores from einsum (this form is not proven equal to the fused kernel)",
                       Fallback("manual", "rewrite the scores as torch.matmul(q, k.transpose(-2, -1)) on [B, N, S, D] "
                                "tensors (or call F.scaled_dot_product_attention) so NPU302/NPU301 can fuse them"))


_BINARY = {cst.AddAssign: cst.Add, cst.MultiplyAssign: cst.Multiply, cst.DivideAssign: cst.Divide,
           cst.SubtractAssign: cst.Subtract}


def _reads_only_metadata(stmt, name: str) -> bool:
    """Every use of ``name`` in ``stmt`` reads its dtype, device or shape."""
    nodes = walk(stmt)
    uses = [n for n in nodes if is_name(n, name)]
    meta = [n for n in nodes if isinstance(n, cst.Attribute) and is_name(n.value, name)
            and n.attr.value in ("dtype", "device", "shape")]
    meta_calls = [n for n in nodes if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
                  and is_name(n.func.value, name) and n.func.attr.value in ("size", "dim")]
    return bool(uses) and len(uses) == len(meta) + len(meta_calls)


def _paren(expr) -> str:
    text = code(expr)
    return f"({text})" if isinstance(expr, cst.BinaryOperation) and not expr.lpar else text


def _softmax(value, cur: str, qualify: Qualify) -> Optional[List[cst.BaseExpression]]:
    """The casts around ``softmax(cur, dim=-1)`` (a list, maybe empty), or None when it is not one."""
    casts = []
    while method(value, CASTS) and not _is_softmax_call(value, cur, qualify):
        casts.append(value)
        value = value.func.value
    return casts if _is_softmax_call(value, cur, qualify) else None


def _is_softmax_of(value, cur, qualify) -> bool:
    return _softmax(value, cur, qualify) is not None


def _is_softmax_call(call, cur: str, qualify: Qualify) -> bool:
    if not isinstance(call, cst.Call):
        return False
    if qualify(call.func) in SOFTMAX:
        source, dim = arg(call, 0, "input"), arg(call, 1, "dim")
    elif method(call, {"softmax"}):
        source, dim = call.func.value, arg(call, 0, "dim")
    else:
        return False
    # the source may be cast first: softmax(scores.float(), dim=-1)
    while method(source, CASTS):
        source = source.func.value
    return is_name(source, cur) and dim is not None and _int(dim) in (-1, 3)


def _softmax_in(stmt, name: str, qualify: Qualify) -> bool:
    return any(_is_softmax_call(c, name, qualify) for c in m.findall(stmt, m.Call()))


def _is_repeat_kv(module: cst.Module, qualify: Qualify, func: cst.Name) -> bool:
    """``repeat_kv`` is Hugging Face's: imported from transformers, or defined here with expand + reshape."""
    if (qualify(func) or "").startswith("transformers."):
        return True
    for node in module.body:
        if isinstance(node, cst.FunctionDef) and node.name.value == "repeat_kv":
            text = code(node)
            return "None, :, :]" in text and ".expand(" in text and ".reshape(" in text
    return False


def _substitute(expr, temps: Dict[str, cst.BaseExpression]):
    if not temps:
        return expr
    return expr.visit(_Renamer({k: v for k, v in temps.items()}))


def _rename(expr, mapping: Dict[str, str]):
    if not mapping:
        return expr
    return expr.visit(_Renamer({k: cst.Name(v) for k, v in mapping.items()}))


class _Renamer(cst.CSTTransformer):
    def __init__(self, mapping):
        super().__init__()
        self.mapping = mapping

    def leave_Name(self, original, updated):
        return self.mapping.get(original.value, updated)


def _blocks_of(stmt) -> List[cst.BaseSuite]:
    blocks = []
    for attr in ("body", "orelse", "finalbody"):
        part = getattr(stmt, attr, None)
        if isinstance(part, cst.BaseSuite):
            blocks.append(part)
        elif isinstance(part, (cst.Else, cst.Finally)):
            blocks.append(part.body)
        elif isinstance(part, cst.If):
            blocks.extend(_blocks_of(part))
    for handler in getattr(stmt, "handlers", ()):
        blocks.append(handler.body)
    return blocks


def _statements_in_order(block) -> List[cst.CSTNode]:
    """Every statement of a block, nested ones included, in source order (not entering defs)."""
    out = []
    for stmt in getattr(block, "body", ()):
        out.append(stmt)
        if not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and not isinstance(stmt, cst.SimpleStatementLine):
            for child in _blocks_of(stmt):
                out.extend(_statements_in_order(child))
    return out


def _after(body, end_stmt) -> List[cst.CSTNode]:
    order = _statements_in_order(body)
    index = next(i for i, s in enumerate(order) if s is end_stmt)
    # compound statements that enclose the run come before it in the order; their headers were
    # already evaluated, their later statements follow
    return [s for s in order[index + 1:]]


def _loads_after(body, end_stmt) -> Set[str]:
    names = set()
    for stmt in _after(body, end_stmt):
        target = stmt if isinstance(stmt, cst.SimpleStatementLine) else _header(stmt)
        if target is not None:
            names |= names_in(target)
    return names


def _header(stmt) -> Optional[cst.CSTNode]:
    for attr in ("test", "iter", "items"):
        part = getattr(stmt, attr, None)
        if part is not None:
            return part if not isinstance(part, (list, tuple)) else cst.Tuple([cst.Element(i.item) for i in part])
    return None


def _load_sites_after(body, end_stmt, name: str) -> List[Tuple[str, ...]]:
    """For each later use of ``name``: the names tested by the conditionals that guard it, or
    ``("<return>",)`` for a use in a return statement."""
    sites = []
    for stmt in _after(body, end_stmt):
        if not isinstance(stmt, cst.SimpleStatementLine):
            if _header(stmt) is not None and name in names_in(_header(stmt)):
                sites.append(())
            continue
        for small in stmt.body:
            if name not in names_in(small):
                continue
            for use in m.findall(small, m.Name(name)):
                flags = _guarding_flags(small, use)
                sites.append(flags or (("<return>",) if isinstance(small, cst.Return) else ()))
    return sites


def _guarding_flags(root, use) -> Tuple[str, ...]:
    """Names whose truth the use of ``use`` inside ``root`` depends on (IfExp tests)."""
    flags = []
    for ifexp in m.findall(root, m.IfExp()):
        if any(n is use for n in m.findall(ifexp.body, m.Name())) and isinstance(ifexp.test, cst.Name):
            flags.append(ifexp.test.value)
    return tuple(flags)


# ------------------------------------------------------------------------------ the visitor

def is_vendored_helper(path: str) -> bool:
    """The helper module this tool vendors (its fallbacks call the original APIs on purpose)."""
    return path.replace("\\", "/").rsplit("/", 1)[-1] == "npu_glue.py"


class FunctionRule:
    """Mixin for rules that analyse each function: tracks the enclosing class and indentation."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._classes: List[cst.ClassDef] = []
        self._indents: List[str] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.append(node)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.pop()

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._indents.append(node.indent if node.indent is not None else self.ctx.module.default_indent)

    def leave_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._indents.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if is_vendored_helper(self.ctx.path):
            return
        # cheap filter: functions that mention a softmax (under any imported alias)
        aliases = {"softmax"} | {local for local, qualified in self.ctx.names.imports.items() if qualified & SOFTMAX}
        if not self.ctx.tree.names(node.body) & aliases:
            return
        cls = self._classes[-1] if self._classes and node in self._classes[-1].body.body else None
        analysis = FunctionAnalysis(node, cls, self.ctx.module, self.qualified_name, "".join(self._indents))
        for result in analysis.results:
            self.found(result)

    def found(self, result) -> None:
        raise NotImplementedError
