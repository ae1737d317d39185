"""Rewriting whole-string literals that name a device (``"cuda:0"``) or a backend (``"nccl"``).

A string is only touched where the code uses it as such: a keyword argument with a known name
(``device=``, ``backend=``) or a name the rule's ``keyword_hint`` accepts (configuration objects:
``ddp_backend=``, ``device_map=``), the first argument of a known function, a value assigned to or
compared with a variable named like one (``device``, ``args.backend``), a parameter default, or a
ternary whose two branches are both such strings (``"cuda" if ... else "cpu"``). Strings inside
larger text (log messages, paths) never match because the whole value must match. A rule with an
``unplaced`` record reports every other whole-string match of a torch file (a dict key, a value
compared with an unknown name): the vendor's static tool rewrites those too, this one keeps them,
so they are listed rather than silent.
"""

from __future__ import annotations

import re
from typing import ClassVar, Dict, FrozenSet, Iterator, Optional, Pattern, Set

import libcst as cst

from npu_migrate.migrate.rules._scope import PACKAGE, TORCH, TorchScoped
from npu_migrate.migrate.rules._syntax import code
from npu_migrate.migrate.rules._table import TORCH_NPU, dotted, plan_of


MESSAGE_CALLS = frozenset({"print", "log", "debug", "info", "warning", "warn", "error", "exception", "critical",
                           "warning_once", "info_once", "write"})


def string_value(node: cst.CSTNode) -> Optional[str]:
    """The value of a plain string, or of an f-string with every ``{...}`` read as ``0``."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    if isinstance(node, cst.FormattedString):
        text = []
        for part in node.parts:
            if isinstance(part, cst.FormattedStringText):
                text.append(part.value)
            elif part.format_spec or part.conversion:
                return None
            else:
                text.append("0")
        return "".join(text)
    return None


def literal_sites(expr: cst.CSTNode, pattern: Pattern) -> Iterator[cst.CSTNode]:
    """String nodes matching ``pattern`` in ``expr``, looking through ternaries, dicts and sequences."""
    value = string_value(expr)
    if value is not None:
        if pattern.fullmatch(value):
            yield expr
    elif isinstance(expr, cst.IfExp):
        yield from literal_sites(expr.body, pattern)
        yield from literal_sites(expr.orelse, pattern)
    elif isinstance(expr, cst.BooleanOperation):  # ``get_accelerator() or "cuda"``
        yield from literal_sites(expr.left, pattern)
        yield from literal_sites(expr.right, pattern)
    elif isinstance(expr, cst.Dict):
        for element in expr.elements:
            if isinstance(element, cst.DictElement):
                yield from literal_sites(element.key, pattern)
                yield from literal_sites(element.value, pattern)
    elif isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
        for element in expr.elements:
            yield from literal_sites(element.value, pattern)


def replace_words(node: cst.CSTNode, words: Dict[str, str]) -> cst.CSTNode:
    def sub(text: str) -> str:
        return re.sub("|".join(map(re.escape, words)), lambda m: words[m.group(0)], text)

    if isinstance(node, cst.SimpleString):
        return node.with_changes(value=sub(node.value))
    parts = [p.with_changes(value=sub(p.value)) if isinstance(p, cst.FormattedStringText) else p for p in node.parts]
    return node.with_changes(parts=parts)


def last_identifier(expr: cst.CSTNode) -> Optional[str]:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None


class LiteralRule(TorchScoped):
    """Rewrites literals matching ``pattern`` in the positions described in the module docstring
    (only in files that use torch: ``_scope``)."""

    pattern: ClassVar[Pattern]  # a literal to rewrite (whole value)
    kin: ClassVar[Pattern]  # a literal of the same kind (for "both ternary branches" detection)
    words: ClassVar[Dict[str, str]]  # substring replacements inside a matching literal
    keywords: ClassVar[FrozenSet[str]]  # keyword arguments (and dict keys) that take such a literal
    keyword_hint: ClassVar[Optional[Pattern]] = None  # or whose name matches this (``ddp_backend``)
    first_arg_of: ClassVar[FrozenSet[str]]  # functions whose first positional argument takes one
    hint: ClassVar[Pattern]  # a variable whose (lower-case) name matches this holds such a literal
    not_hint: ClassVar[Optional[Pattern]] = None  # a name matching this holds another kind of string
    unplaced: ClassVar[Optional[str]] = None  # the record (plan) of matches kept elsewhere; None: not reported

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._seen: Set[int] = set()
        imports_torch = "torch" in ctx.names.imported_heads()
        self._imports = (TORCH_NPU,) if imports_torch else ()

    def takes_literal(self, keyword: Optional[str]) -> bool:
        """A keyword argument or dict key named ``keyword`` takes such a literal."""
        if not keyword or self.other_kind(keyword):
            return False
        return keyword in self.keywords or (self.keyword_hint is not None and self.keyword_hint.search(keyword.lower()) is not None)

    def takes_first_arg(self, call: cst.Call) -> bool:
        return dotted(call.func) is not None and self.qualified_name(call.func) in self.first_arg_of

    def named_like(self, expr: cst.CSTNode) -> bool:
        """``device``, ``self.device``, ``x.device.type``, ``str(device)``, ``dist.get_backend()``."""
        if isinstance(expr, cst.Call):
            ident = last_identifier(expr.func)
            if ident == "str" and expr.args:
                return self.named_like(expr.args[0].value)
            return bool(ident) and ident.startswith("get_") and self.hinted(ident)
        ident = last_identifier(expr)
        if ident == "type" and isinstance(expr, cst.Attribute):
            return self.named_like(expr.value)
        return self.hinted(ident)

    def hinted(self, name: Optional[str]) -> bool:
        return bool(name) and self.hint.search(name.lower()) is not None

    def other_kind(self, name: Optional[str]) -> bool:
        """A name (``accelerator``) whose strings look like these but are something else."""
        return bool(name) and self.not_hint is not None and self.not_hint.search(name.lower()) is not None

    def keep(self, site: cst.CSTNode) -> bool:
        """A matching literal that must stay as it is (subclasses say which)."""
        return False

    def leave_alone(self, expr: Optional[cst.CSTNode]) -> None:
        if expr is not None:
            self._seen.update(id(site) for site in literal_sites(expr, self.pattern))

    def fix(self, expr: Optional[cst.CSTNode]) -> None:
        if expr is None:
            return
        for site in literal_sites(expr, self.pattern):
            if id(site) in self._seen or self.keep(site):
                continue
            self._seen.add(id(site))
            replaced = replace_words(site, self.words)
            self.scoped_replace(site, replaced, f"{code(site)} → {code(replaced)}", target=string_value(replaced),
                                imports=self._imports)

    def leave_Module(self, original_node: cst.Module) -> None:
        """Report the matches no position took (``unplaced``), in torch files, but docstrings and the
        strings that ``keep`` says must stay (a test guarding CUDA-only code: NPU207 reports it)."""
        if self.unplaced is None or self.scope not in (TORCH, PACKAGE):
            return
        parents = self.ctx.tree.parents()
        for site in self.ctx.tree.of_type(original_node, cst.SimpleString, cst.FormattedString):
            value = string_value(site)
            if value is None or not self.pattern.fullmatch(value) or id(site) in self._seen or self.keep(site):
                continue
            if isinstance(parents.get(id(site)), (cst.Expr, cst.ConcatenatedString)) or self._message(site, parents):
                continue
            why = f"{code(site)} kept: not where this code names its {self.unplaced_what}"
            self.report(site, why, fallback=plan_of(self.ctx.table, self.unplaced, why), api=self.unplaced)

    unplaced_what: ClassVar[str] = "device"

    @staticmethod
    def _message(site: cst.CSTNode, parents) -> bool:
        """An argument of a call that prints or logs (``logging.info("cuda")``): text, not a value."""
        arg = parents.get(id(site))
        call = parents.get(id(arg)) if isinstance(arg, cst.Arg) else None
        return isinstance(call, cst.Call) and (last_identifier(call.func) or "") in MESSAGE_CALLS

    # -- positions ------------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        positional = [a for a in node.args if a.keyword is None and not a.star]
        for arg in node.args:
            if arg.keyword is not None and self.other_kind(arg.keyword.value):
                self.leave_alone(arg.value)
            elif arg.keyword is not None and self.takes_literal(arg.keyword.value):
                self.fix(arg.value)
        if positional and self.takes_first_arg(node):
            self.fix(positional[0].value)
        flags = [(string_value(a.value) or "").lstrip("-") for a in positional]
        for arg in node.args:  # add_argument("--device", default="cuda")
            if arg.keyword is not None and arg.keyword.value in ("default", "choices"):
                if any(self.other_kind(flag) for flag in flags):
                    self.leave_alone(arg.value)
                elif any(self.hinted(flag) for flag in flags):
                    self.fix(arg.value)

    def visit_DictElement(self, node: cst.DictElement) -> None:
        if self.takes_literal(string_value(node.key)):
            self.fix(node.value)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        branches = [string_value(node.body), string_value(node.orelse)]
        if all(b is not None and self.kin.fullmatch(b) for b in branches):
            self.fix(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        if any(self.other_kind(last_identifier(t.target)) for t in node.targets):
            self.leave_alone(node.value)
        elif any(self.named_like(t.target) for t in node.targets):
            self.fix(node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if self.other_kind(last_identifier(node.target)):
            self.leave_alone(node.value)
        elif self.named_like(node.target):
            self.fix(node.value)

    def visit_Parameters(self, node: cst.Parameters) -> None:
        for param in (*node.posonly_params, *node.params, *node.kwonly_params):
            if param.default is not None and self.other_kind(param.name.value):
                self.leave_alone(param.default)
            elif param.default is not None and self.hinted(param.name.value):
                self.fix(param.default)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        operands = [node.left, *(c.comparator for c in node.comparisons)]
        if any(self.named_like(o) for o in operands):
            for operand in operands:
                self.fix(operand)
