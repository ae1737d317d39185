"""Qualified names of the expressions a rule asks about, with scope awareness at low cost.

libcst's ScopeProvider is exact but costs about 3x the parse of a file (measured on
transformers/models), more than the whole rest of a run. Almost every file binds a name like
``torch`` or ``F`` only through imports, and then the import table alone answers exactly. So a
walk over the statements collects the import table and every other name binding; a name that is
bound only by imports (all agreeing) resolves from the table, and only a file in which an imported
name is also bound some other way (a parameter, an assignment, a ``def``) pays for ScopeProvider.

Two other ways to import are read as imports, so that nothing they bind goes unmigrated:

- ``from M import *``: after the walk, the names the module reads but never binds (ScopeProvider's
  accesses without a referent; builtins have one) are bound to ``M.name``, as if imported by name
  (``star_names``), when the file has one star import; with several, which module binds a name is
  not known and nothing is bound (``ambiguous_star``; such a file is reported, NPU230);
- ``name = __import__("M")`` (the top package ``M`` names, or ``M`` itself with a ``fromlist``) and
  ``name = importlib.import_module("M")``, with a literal module name, bind ``name`` like an
  ``import`` statement (``dynamic``: the call, the name and the module it binds).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Dict, Iterable, List, Optional, Set, Tuple

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import MetadataWrapper, ScopeProvider

_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_COMPOUND = (cst.If, cst.For, cst.While, cst.With, cst.Try, cst.TryStar, cst.FunctionDef, cst.ClassDef, cst.Match)


def target_names(node: cst.CSTNode) -> Iterable[str]:
    """Names bound by an assignment target (tuples, lists and starred unpacked)."""
    if isinstance(node, cst.Name):
        yield node.value
    elif isinstance(node, (cst.Tuple, cst.List)):
        for element in node.elements:
            yield from target_names(element.value)
    elif isinstance(node, cst.StarredElement):
        yield from target_names(node.value)


class NameResolver:
    def __init__(self, module: cst.Module):
        self.module = module
        self.imports: Dict[str, Set[str]] = defaultdict(set)  # local name -> qualified names bound by imports
        self.other_bindings: Set[str] = set()  # names also bound by something that is not an import
        self.relative_imports = False  # the module imports from its own package (``from .x import y``)
        self.star_modules: List[str] = []  # M of every ``from M import *``, in source order
        self.star_bound: Dict[str, str] = {}  # name -> the star-imported module that binds it
        self.ambiguous_star = False  # names read but never bound, with several star imports to come from
        self.dynamic: Dict[int, Tuple[str, str]] = {}  # id(call) of a bound __import__/import_module -> (name, module)
        self._scopes = None
        self._walk(module.body)
        if self.star_modules:
            self._bind_star_names()

    # -- collecting bindings -------------------------------------------------------------------
    def _walk(self, body) -> None:
        for stmt in body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    self._small(small)
            else:
                self._compound(stmt)

    def _small(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = get_full_name_for_node(alias.name)
                if alias.asname is not None:
                    self.imports[alias.asname.name.value].add(full)
                else:
                    head = full.split(".")[0]
                    self.imports[head].add(head)
        elif isinstance(node, cst.ImportFrom):
            if node.relative:
                self.relative_imports = True
            if node.relative or node.module is None:
                return
            if isinstance(node.names, cst.ImportStar):
                self.star_modules.append(get_full_name_for_node(node.module))
                return
            base = get_full_name_for_node(node.module)
            for alias in node.names:
                name = alias.name.value
                local = alias.asname.name.value if alias.asname is not None else name
                self.imports[local].add(f"{base}.{name}")
        elif isinstance(node, cst.Assign):
            module = self.dynamic_import(node.value)
            if module is not None and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
                self.imports[node.targets[0].target.value].add(module)
                self.dynamic[id(node.value)] = (node.targets[0].target.value, module)
                return
            for target in node.targets:
                self.other_bindings.update(target_names(target.target))
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
            self.other_bindings.update(target_names(node.target))

    def _compound(self, node: cst.CSTNode) -> None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            self.other_bindings.add(node.name.value)
        if isinstance(node, cst.FunctionDef):
            params = node.params
            for param in (*params.posonly_params, *params.params, *params.kwonly_params):
                self.other_bindings.add(param.name.value)
            for star in (params.star_arg, params.star_kwarg):
                if isinstance(star, cst.Param):
                    self.other_bindings.add(star.name.value)
        if isinstance(node, cst.For):
            self.other_bindings.update(target_names(node.target))
        if isinstance(node, cst.With):
            for item in node.items:
                if item.asname is not None:
                    self.other_bindings.update(target_names(item.asname.name))
        if isinstance(node, (cst.Try, cst.TryStar)):
            for handler in node.handlers:
                if handler.name is not None:
                    self.other_bindings.update(target_names(handler.name.name))
                self._walk(handler.body.body)
            for extra in (node.orelse, node.finalbody):
                if extra is not None:
                    self._walk(extra.body.body)
        if isinstance(node, cst.Match):
            self.other_bindings.add("\0match")  # capture patterns: let ScopeProvider decide
            for case in node.cases:
                self._walk(case.body.body)
            return
        if isinstance(node, cst.If):
            self._walk(node.body.body)
            if node.orelse is not None:
                self._compound(node.orelse) if isinstance(node.orelse, cst.If) else self._walk(node.orelse.body.body)
            return
        body = getattr(node, "body", None)
        if isinstance(body, cst.IndentedBlock):
            self._walk(body.body)
        elif isinstance(body, cst.SimpleStatementSuite):
            for small in body.body:
                self._small(small)
        orelse = getattr(node, "orelse", None)
        if isinstance(orelse, cst.Else):
            self._walk(orelse.body.body)

    def dynamic_import(self, node: cst.CSTNode) -> Optional[str]:
        """The module that ``__import__("M")`` / ``importlib.import_module("M")`` returns, with a
        literal, absolute ``M``; None for anything else."""
        if not isinstance(node, cst.Call) or not node.args or node.args[0].keyword is not None:
            return None
        first = node.args[0].value
        module = first.evaluated_value if isinstance(first, cst.SimpleString) else None
        if not isinstance(module, str) or not _MODULE.fullmatch(module):
            return None
        func = get_full_name_for_node(node.func)
        if func == "__import__" and "__import__" not in self.imports and "__import__" not in self.other_bindings:
            by_keyword = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
            positional = [a.value for a in node.args if a.keyword is None]
            level = by_keyword.get("level", positional[4] if len(positional) > 4 else None)
            if level is not None and not (isinstance(level, cst.Integer) and level.evaluated_value == 0):
                return None
            fromlist = by_keyword.get("fromlist", positional[3] if len(positional) > 3 else None)
            empty = fromlist is None or isinstance(fromlist, (cst.List, cst.Tuple)) and not fromlist.elements \
                or isinstance(fromlist, cst.Name) and fromlist.value == "None"
            return module.split(".")[0] if empty else module
        if func is not None and self.qualified_import(func) == "importlib.import_module":
            return module
        return None

    def qualified_import(self, dotted: str) -> Optional[str]:
        """``dotted`` with its head replaced by what imports bind it to (one binding only)."""
        head, _, rest = dotted.partition(".")
        bound = self.imports.get(head, set())
        if len(bound) != 1 or head in self.other_bindings:
            return None
        (qualified,) = bound
        return f"{qualified}.{rest}" if rest else qualified

    def _bind_star_names(self) -> None:
        """Names read but bound nowhere in the module come from its star import (see the docstring)."""
        scopes = self._scopes = MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(ScopeProvider)
        unbound = {access.node.value for scope in set(scopes.values()) if scope is not None
                   for access in scope.accesses if not access.referents and isinstance(access.node, cst.Name)}
        unbound -= set(self.imports) | self.other_bindings
        if len(set(self.star_modules)) > 1:
            self.ambiguous_star = bool(unbound)
            return
        (module,) = set(self.star_modules)
        for name in sorted(unbound):
            self.imports[name].add(f"{module}.{name}")
            self.star_bound[name] = module

    def star_names(self, module: str) -> List[str]:
        """The names the star import of ``module`` binds that the module reads, sorted."""
        return sorted(name for name, source in self.star_bound.items() if source == module)

    def imported_heads(self) -> Set[str]:
        """The top-level package of everything the module imports (star imports included)."""
        return {q.split(".")[0] for names in self.imports.values() for q in names} | \
            {m.split(".")[0] for m in self.star_modules}

    # -- answering -----------------------------------------------------------------------------
    def is_imported(self, name: str) -> bool:
        return name in self.imports

    def may_denote(self, qualified: Iterable[str]) -> Set[str]:
        """Every local name that ``qualified_name`` may resolve, on its own, to one of ``qualified``
        (names it would hand to ScopeProvider included)."""
        wanted = set(qualified)
        unsure = "\0match" in self.other_bindings
        return {local for local, bound in self.imports.items()
                if bound & wanted or unsure or len(bound) > 1 or local in self.other_bindings}

    def qualified_name(self, node: cst.CSTNode) -> Optional[str]:
        """The single qualified name of a Name/Attribute chain rooted at an import, else None."""
        dotted = get_full_name_for_node(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        bound = self.imports.get(head)
        if not bound:
            return None
        if len(bound) == 1 and head not in self.other_bindings and "\0match" not in self.other_bindings:
            (qualified,) = bound
            return f"{qualified}.{rest}" if rest else qualified
        return self._exact(node)

    def _exact(self, node: cst.CSTNode) -> Optional[str]:
        if self._scopes is None:
            self._scopes = MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(ScopeProvider)
        scope = self._scopes.get(node)
        if scope is None:
            return None
        names = {q.name for q in scope.get_qualified_names_for(node) if q.source.name == "IMPORT"}
        return names.pop() if len(names) == 1 else None
