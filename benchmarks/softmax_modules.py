"""An independent detector (plain libcst, nothing of the engine) of attention whose softmax is a MODULE:

    self.attend = nn.Softmax(dim=-1)                      # in __init__, alone or
    self.attend = nn.Sequential(nn.Softmax(dim=-1), nn.Dropout(p))   # inside nn.Sequential
    ...
    dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale        # q·kᵀ scores (or an einsum)
    attn = self.attend(dots)                              # the module called on the scores
    out = torch.matmul(self.dropout(attn), v)             # the probabilities multiplied by V

and the same module built and called in place, ``nn.Softmax(dim=-1)(scores)``. ``corpus.silent``
counts these sites as attention components, so that a form the engine's own detectors do not read
is not invisible to the benchmark.

Within a function a name stands for every expression assigned to it (no order, no branches): the
detector over-approximates, and a site it finds is listed by line so that it can be read.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterator, List, Set, Tuple

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

PRODUCTS = frozenset({"matmul", "bmm", "baddbmm", "einsum"})  # calls that multiply tensors
TRANSPOSES = frozenset({"transpose", "permute", "swapaxes", "swapdims", "mT", "T"})  # kᵀ
DEPTH = 12  # names followed back through their assignments


def dotted(node: cst.BaseExpression) -> str:
    """``nn.Softmax`` for ``nn.Softmax``, ``self.attend`` for ``self.attend``; "" for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else ""
    return ""


def _last(node: cst.BaseExpression) -> str:
    return dotted(node).rsplit(".", 1)[-1]


def is_softmax_module(expr: cst.BaseExpression) -> bool:
    """``Softmax(...)`` under any prefix, or an ``nn.Sequential`` (or either branch of a conditional)
    holding one."""
    if isinstance(expr, cst.Call):
        if _last(expr.func) == "Softmax":
            return True
        return _last(expr.func) == "Sequential" and any(is_softmax_module(a.value) for a in expr.args)
    if isinstance(expr, cst.IfExp):
        return is_softmax_module(expr.body) or is_softmax_module(expr.orelse)
    return False


def softmax_attributes(cls: cst.ClassDef) -> Set[str]:
    """The attributes ``self.<name>`` that the class's ``__init__`` sets to a softmax module."""
    found: Set[str] = set()
    for init in (s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"):
        for node in _walk(init.body):
            if isinstance(node, cst.Assign) and is_softmax_module(node.value):
                found |= {t.target.attr.value for t in node.targets if dotted(t.target).startswith("self.")
                          and dotted(t.target).count(".") == 1}
    return found


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from _walk(child)


def _local(func: cst.FunctionDef) -> Iterator[cst.CSTNode]:
    """The nodes of ``func``'s body, not those of the functions and classes defined in it."""
    pending = [func.body]
    while pending:
        node = pending.pop()
        yield node
        pending.extend(c for c in node.children if not isinstance(c, (cst.FunctionDef, cst.ClassDef)))


def _names(target: cst.BaseExpression) -> Iterator[str]:
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from _names(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from _names(target.value)


def assignments(func: cst.FunctionDef) -> Dict[str, List[cst.BaseExpression]]:
    """Every expression assigned to each local name of ``func`` (``a, b = e`` gives ``e`` to both)."""
    found: Dict[str, List[cst.BaseExpression]] = {}
    for node in _local(func):
        if isinstance(node, cst.Assign):
            pairs = [(name, node.value) for t in node.targets for name in _names(t.target)]
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)) and node.value is not None:
            pairs = [(name, node.value) for name in _names(node.target)]
        else:
            continue
        for name, value in pairs:
            found.setdefault(name, []).append(value)
    return found


class _Function:
    """One function's expressions, names followed back through their assignments."""

    def __init__(self, func: cst.FunctionDef):
        self.func = func
        self.assigned = assignments(func)

    def reaches(self, expr: cst.CSTNode, test: Callable[[cst.CSTNode], bool]) -> bool:
        """Whether ``test`` holds for a node of ``expr`` or of what its names were assigned (to DEPTH)."""
        pending, seen = [(expr, 0)], set()
        while pending:
            node, depth = pending.pop()
            for part in _walk(node):
                if test(part):
                    return True
                if isinstance(part, cst.Name) and depth < DEPTH and part.value not in seen:
                    seen.add(part.value)
                    pending.extend((value, depth + 1) for value in self.assigned.get(part.value, ()))
        return False

    def products(self) -> Iterator[cst.CSTNode]:
        return (n for n in _local(self.func) if operands(n) is not None)

    def is_scores(self, expr: cst.BaseExpression) -> bool:
        """``expr`` is computed from q·kᵀ: an einsum, or a product one of whose operands is transposed."""
        def scores(node: cst.CSTNode) -> bool:
            if isinstance(node, cst.Call) and _last(node.func) == "einsum":
                return True
            return operands(node) is not None and any(self.reaches(o, _transposes) for o in operands(node))

        return self.reaches(expr, scores)


def operands(node: cst.CSTNode):
    """The operands of a tensor product (``a @ b``, ``torch.matmul(a, b)``, ``einsum(eq, a, b)``), else None."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        return [node.left, node.right]
    if isinstance(node, cst.Call) and _last(node.func) in PRODUCTS:
        return [a.value for a in node.args]
    return None


def _transposes(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        return node.func.attr.value in TRANSPOSES
    return isinstance(node, cst.Attribute) and node.attr.value in ("mT", "T")


def sites(module: cst.Module) -> List[Tuple[cst.FunctionDef, int]]:
    """(function, line) of each call of a softmax module on q·kᵀ scores whose result is multiplied
    (through names, dropout and casts) by another tensor, as V."""
    found = []
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    lines = wrapper.resolve(PositionProvider)
    for func, attributes in _functions(module):
        body = _Function(func)
        for call in (n for n in _local(func) if isinstance(n, cst.Call) and n.args):
            modular = is_softmax_module(call.func) or (
                dotted(call.func).startswith("self.") and dotted(call.func)[5:] in attributes)
            if modular and body.is_scores(call.args[0].value) and any(
                    body.reaches(operand, lambda n, c=call: n is c) for p in body.products() for operand in operands(p)):
                found.append((func, lines[call].start.line))
    return found


def _functions(module: cst.Module) -> Iterator[Tuple[cst.FunctionDef, Set[str]]]:
    """Every function, with the softmax-module attributes of the class it is a method of."""
    def visit(node: cst.CSTNode, attributes: Set[str]):
        for child in node.children:
            if isinstance(child, cst.ClassDef):
                yield from visit(child, softmax_attributes(child))
            elif isinstance(child, cst.FunctionDef):
                yield child, attributes
                yield from visit(child, set())
            else:
                yield from visit(child, attributes)

    return visit(module, set())
