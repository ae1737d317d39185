"""Triage: which files can hold a site at all, decided from CPython's own parser before libcst.

libcst's parse is most of the cost of a file, and most files that mention a rule's trigger bytes
(``act``, ``cat``, ``sqrt``: words inside other words, or in comments) hold no site. ``ast`` parses
several times faster; one walk of its tree collects what the rules' own cheap tests read: every
identifier the code names (variables, attributes, definitions, parameters, keywords, imported
names), whether it multiplies, whether it holds a ``0.5`` literal, and its imports (``Words``). A
rule that declares ``may_find(words)`` (``migrate.rules.base.Rule``) answers whether a file with
these words can hold one of its sites, from the same vocabulary its per-function test uses; the
residual pass's families answer from their declared words. A file is handed to libcst unless every
rule that its bytes made applicable, and every enabled family, says no; it then gets the result
libcst would have given it: unchanged, with no finding.

The triage is conservative by construction: each answer is a necessary condition of the rule's own
test, made weaker by reading the whole file instead of one function (a superset of its names, and
of the local names ``NameResolver.may_denote`` could return). A rule that declares nothing keeps
every file. A file that ``ast`` does not accept (a syntax error, a newer grammar, null bytes), or
nests deeper than ``MAX_DEPTH``, is always handed on: libcst decides what its result is.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple


MAX_DEPTH = 100  # deeper trees go to libcst whatever their words (its recursion limits decide their result)
_DYNAMIC = ("__import__", "import_module")


class Function:
    """One ``def`` of the module: what its code names (decorators, parameters and inner defs
    included), whether it multiplies or holds a 0.5 literal."""

    __slots__ = ("name", "owner", "outer", "names", "multiplies", "products", "half", "operators")

    def __init__(self, name: str, owner: Optional[str], outer: Optional["Function"]) -> None:
        self.name = name
        self.owner = owner  # the class it is defined in (at any level above), if any
        self.outer = outer
        self.names: Set[str] = set()
        self.multiplies = False
        self.products = False  # a ``*`` or ``*=`` of two values neither of which is a number literal
        self.half = False
        self.operators: Set[str] = set()  # binary operators and augmented assignments, by libcst's names

    def may_compute(self, op: str) -> bool:
        """Whether its code may spell the view's ``op`` (a name of one of its spellings, or an
        operator); ``may_compute`` below also checks what a function name refers to."""
        return bool(self.names & spelled(op)[0] or self.operators & spelled(op)[1])


class Words:
    """What one module's code names, read from its ``ast`` tree (see the module docstring)."""

    def __init__(self, tree: ast.AST) -> None:
        self.names: Set[str] = set()  # every identifier (a superset of libcst's Name values)
        self.multiplies = False  # a ``*`` or ``*=``
        self.half = False  # a 0.5 literal (``** -0.5``)
        self.has_match = False  # a ``match`` statement (its captures make names ambiguous)
        self.star_modules: Set[str] = set()  # M of every absolute ``from M import *``
        self.imports: Dict[str, Set[str]] = {}  # local name -> the qualified names absolute imports bind it to
        self.dynamic: Set[str] = set()  # names bound to ``__import__(...)`` / ``import_module(...)``
        self.bound: Set[str] = set()  # names bound otherwise (assignment, def, class, parameter, ...)
        self.called: Set[str] = set()  # names called as such (``f(x)``, not ``obj.f(x)``)
        self.operators: Set[str] = set()  # the binary operators used, by libcst's names (``Multiply``)
        self.augmented: Set[str] = set()  # the augmented assignments used (``MultiplyAssign``)
        self._chains: Set[Tuple[str, ...]] = set()  # (root, attr, attr, ...) of every chain rooted at a name
        self._refs: Optional[Set[str]] = None
        self._loose: Set[str] = set()
        self.functions: List[Function] = []  # every def, with what its code names (inner defs' included)
        self.depth = 0
        self._read(tree)
        self._by_name: Optional[Dict[str, List[Function]]] = None

    def reach(self, function: "Function") -> "Function":
        """``function`` with the functions of this module it may call by name (at any depth; the view
        inlines them): the union of their names and marks."""
        if self._by_name is None:
            self._by_name = {}
            for each in self.functions:
                self._by_name.setdefault(each.name, []).append(each)
        found = Function(function.name, function.owner, None)
        seen, stack = set(), [function]
        while stack:
            current = stack.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            found.names |= current.names
            found.multiplies |= current.multiplies
            found.products |= current.products
            found.half |= current.half
            found.operators |= current.operators
            stack.extend(f for name in current.names & self._by_name.keys() for f in self._by_name[name])
        return found

    def _read(self, tree: ast.AST) -> None:
        names, bound, functions = self.names, self.bound, self.functions
        stack: list = [(tree, 0, None, None)]  # (node, depth, its innermost function, its innermost class)
        pop, push = stack.pop, stack.append
        while stack:
            node, depth, function, cls = pop()
            if depth > self.depth:
                self.depth = depth
            own = function.names if function is not None else names
            kind = node.__class__
            if kind is ast.Name:
                own.add(node.id)
                if node.ctx.__class__ is not ast.Load:
                    bound.add(node.id)
                continue
            if kind is ast.Attribute:
                own.add(node.attr)
                parts, inner = [node.attr], node.value
                while inner.__class__ is ast.Attribute:
                    parts.append(inner.attr)
                    inner = inner.value
                if inner.__class__ is ast.Name:
                    parts.append(inner.id)
                    self._chains.add(tuple(reversed(parts)))
            elif kind is ast.BinOp or kind is ast.AugAssign:
                operator = _OPERATORS.get(node.op.__class__)
                if node.op.__class__ is ast.Mult:
                    self.multiplies = True
                    if function is not None:
                        function.multiplies = True
                        operands = (node.left, node.right) if kind is ast.BinOp else (node.value,)
                        function.products = function.products or not any(map(_number, operands))
                spelled_as = operator if kind is ast.BinOp else f"{operator}Assign"
                (self.operators if kind is ast.BinOp else self.augmented).add(spelled_as)
                if function is not None:
                    function.operators.add(spelled_as)
            elif kind is ast.Constant:
                if node.value is None or node.value is True or node.value is False:
                    own.add(repr(node.value))  # libcst's Names
                elif node.value.__class__ is float and node.value == 0.5:
                    self.half = True
                    if function is not None:
                        function.half = True
                continue
            elif kind is ast.Call:
                self._call(node, own)
            elif kind is ast.Assign:
                if node.value.__class__ is ast.Call and _callee(node.value) in _DYNAMIC:
                    self.dynamic.update(t.id for t in node.targets if t.__class__ is ast.Name)
            elif kind in _DEFINITIONS:
                own.add(node.name)
                bound.add(node.name)
                if kind is ast.ClassDef:
                    cls = node.name
                else:  # its decorators, parameters and annotations are the function's too (as in libcst)
                    function = Function(node.name, cls, function)
                    function.names.add(node.name)
                    functions.append(function)
                    own = function.names
            elif kind is ast.arg:
                own.add(node.arg)
                bound.add(node.arg)
            elif kind is ast.keyword:
                if node.arg is not None:
                    own.add(node.arg)
            elif kind is ast.Import or kind is ast.ImportFrom:
                self._import(node, own)
            elif kind is ast.Global or kind is ast.Nonlocal:
                own.update(node.names)
            elif kind is ast.ExceptHandler:
                if node.name is not None:
                    own.add(node.name)
                    bound.add(node.name)
            elif kind is ast.Match:
                self.has_match = True
            elif kind in _PATTERNS:
                for field in ("name", "rest"):
                    value = getattr(node, field, None)
                    if value is not None:
                        own.add(value)
                        bound.add(value)
                own.update(getattr(node, "kwd_attrs", ()))
            depth += 1
            for child in ast.iter_child_nodes(node):
                push((child, depth, function, cls))
        for function in reversed(functions):  # inner functions were met after the ones around them
            outer = function.outer
            if outer is not None:
                outer.names |= function.names
                outer.multiplies |= function.multiplies
                outer.products |= function.products
                outer.half |= function.half
                outer.operators |= function.operators
            names |= function.names

    def _import(self, node, own: Set[str]) -> None:
        if node.__class__ is ast.ImportFrom:
            module = node.module or ""
            own.update(filter(None, module.split(".")))
            relative = bool(node.level)
            for alias in node.names:
                if alias.name == "*":
                    if not relative and module:
                        self.star_modules.add(module)
                    continue
                own.add(alias.name)
                local = alias.asname or alias.name
                own.add(local)
                if not relative and module:
                    self.imports.setdefault(local, set()).add(f"{module}.{alias.name}")
            return
        for alias in node.names:
            own.update(alias.name.split("."))
            if alias.asname is not None:
                own.add(alias.asname)
                self.imports.setdefault(alias.asname, set()).add(alias.name)
            else:
                head = alias.name.split(".")[0]
                self.imports.setdefault(head, set()).add(head)

    def _call(self, node: ast.Call, own: Set[str]) -> None:
        """A called name; ``__import__("M")`` / ``import_module("M")``: the module's parts are named too."""
        if node.func.__class__ is ast.Name:
            self.called.add(node.func.id)
        if _callee(node) in _DYNAMIC and node.args and node.args[0].__class__ is ast.Constant \
                and isinstance(node.args[0].value, str):
            own.update(filter(None, node.args[0].value.split(".")))

    def callees(self) -> Set[str]:
        """The names called as such, and what imports bind them to."""
        return self.called | {q for name in self.called for q in self.imports.get(name, ())}

    def may_reference(self, qualified: str) -> bool:
        """Whether ``NameResolver.qualified_name`` may give ``qualified`` for a name or attribute
        chain of the module: its head is imported (by name, star or at run time) and its import, or
        the head itself, followed by the chain, spells ``qualified``."""
        if self._refs is None:
            self._resolve()
        return qualified in self._refs or qualified.rsplit(".", 1)[-1] in self._loose

    def _resolve(self) -> None:
        refs: Set[str] = set()
        chains = self._chains | {(name,) for name in self.names}
        for chain in chains:
            head, rest = chain[0], ".".join(chain[1:])
            for module in self.star_modules:  # a name the module reads but does not bind
                refs.add(f"{module}.{'.'.join(chain)}")
            if head in self.dynamic:
                self._loose.add(chain[-1])  # bound to a module this walk does not resolve
            if head not in self.imports:
                continue
            for base in (*self.imports[head], head):
                refs.add(f"{base}.{rest}" if rest else base)
        self._refs = refs

    def may_denote(self, qualified: Iterable[str]) -> Set[str]:
        """A superset of the local names ``NameResolver.may_denote(qualified)`` can return for any
        function of the module: the last parts of ``qualified`` (an import or star import names
        them), names imported as one of them, and every name whose binding the resolver leaves open
        (imported and bound otherwise, imported twice, bound by a run-time import; all imported
        names in a module with a ``match`` statement)."""
        wanted = set(qualified)
        found = {q.rsplit(".", 1)[-1] for q in wanted} | self.dynamic
        for local, bound in self.imports.items():
            if bound & wanted or len(bound) > 1 or local in self.bound or self.has_match:
                found.add(local)
        return found


@lru_cache(maxsize=None)
def spelled(op: str) -> Tuple[FrozenSet[str], FrozenSet[str]]:
    """(the names, the operators) that spell the view's ``op`` (``view.spellings``): its methods
    (and their in-place forms), the last part of its functions and module classes, and libcst's
    names of its binary operators and augmented assignments."""
    from .view.spellings import AUGMENTED, FUNCTIONS, METHODS, MODULES, OPERATORS

    names = {n for n, spec in METHODS.items() if spec[0] == op}
    names |= {f"{n}_" for n in names}
    names |= {q.rsplit(".", 1)[-1] for table in (FUNCTIONS, MODULES) for q, spec in table.items() if spec[0] == op}
    operators = {c.__name__ for table in (OPERATORS, AUGMENTED) for c, o in table.items() if o == op}
    return frozenset(names), frozenset(operators)


def may_compute(words: Words, op: str) -> bool:
    """Whether a function of the module may compute the view's ``op`` (``view``) in one of
    its spellings (``view.spellings``): a method of that name (or its in-place form), a function
    or module class it may reference, or an operator."""
    from .view.spellings import AUGMENTED, FUNCTIONS, METHODS, MODULES, OPERATORS

    if any(spec[0] == op and (name in words.names or f"{name}_" in words.names) for name, spec in METHODS.items()):
        return True
    if any(spec[0] == op and words.may_reference(name) for table in (FUNCTIONS, MODULES)
           for name, spec in table.items()):
        return True
    return any(o == op and c.__name__ in words.operators for c, o in OPERATORS.items()) or \
        any(o == op and c.__name__ in words.augmented for c, o in AUGMENTED.items())


def computes(words: Words, function: Function, op: str) -> bool:
    """Whether ``function`` (with the functions it calls) may compute ``op``: it spells it, and the
    module may reference what it names; or a module class of the op (``self.act = nn.SiLU()``, set
    in another method) is referenced anywhere in the module."""
    from .view.spellings import MODULES

    return function.may_compute(op) and may_compute(words, op) or \
        any(spec[0] == op and words.may_reference(name) for name, spec in MODULES.items())


def _number(node: ast.AST) -> bool:
    """A number literal (``2``, ``-0.5``)."""
    while node.__class__ is ast.UnaryOp:
        node = node.operand
    return node.__class__ is ast.Constant and node.value.__class__ in (int, float)


def _callee(call: ast.Call) -> Optional[str]:
    func = call.func
    return func.id if func.__class__ is ast.Name else func.attr if func.__class__ is ast.Attribute else None


_OPERATORS = {ast.Mult: "Multiply", ast.Div: "Divide", ast.Add: "Add", ast.Sub: "Subtract", ast.MatMult: "MatrixMultiply",
              ast.Pow: "Power", ast.FloorDiv: "FloorDivide", ast.Mod: "Modulo", ast.LShift: "LeftShift",
              ast.RShift: "RightShift", ast.BitOr: "BitOr", ast.BitXor: "BitXor", ast.BitAnd: "BitAnd"}
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_PATTERNS = (ast.MatchAs, ast.MatchStar, ast.MatchMapping, ast.MatchClass)


def words_of(text: str) -> Optional[Words]:
    """The words of ``text``, or None when ``ast`` does not accept it or it nests too deep."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    try:
        words = Words(tree)
    except RecursionError:
        return None
    if words.depth > MAX_DEPTH:
        return None
    return words


def may_hold_site(text: str, rules: Sequence[type], families: Sequence[object]) -> bool:
    """Whether libcst must see ``text``: True unless its code can hold no site of ``rules`` (the
    rules its bytes made applicable) and no component of the residual ``families`` enabled. A rule
    that declares no test keeps the file before ``ast`` is asked."""
    if any(getattr(rule.may_find, "keeps_every_file", False) for rule in rules):
        return True
    words = words_of(text)
    if words is None:
        return True
    return any(rule.may_find(words) for rule in rules) or any(f.may_find(words) for f in families)
