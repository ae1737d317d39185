"""Finding the code a spec names (``factory``, ``inputs``) for one side of a parity run.

The rule, per side:

- ``file.py:callable`` is looked for in the tree under test first (``<tree>/file.py``), and
  imported by its dotted name when its path is one (``pkg/model.py`` is ``pkg.model``, so its
  relative imports work), else from its file.
- Not there, it is looked for beside the spec (``<spec dir>/file.py``): a harness kept outside
  both trees, shared by the two sides. The tree stays first on ``sys.path`` (the spec's directory
  comes after it), so whatever the harness imports comes from the tree under test.
- A file must lie (symlinks resolved) inside the tree under test or beside the spec, never in a
  parent of both (``../elsewhere/f.py`` is refused when the spec is read) nor in the other side's
  tree: when the spec sits in the original tree, its ``model.py`` cannot stand in for a
  ``model.py`` missing from the migrated tree.
- ``package.module:callable`` is imported with the tree first on ``sys.path``.
- The migrated side must run code of its own tree: the factory's file or a class of the model it
  built must come from the migrated tree; a migrated tree with none of the model's code (the
  factory and the model all come from elsewhere, e.g. an installed package) is an error, since
  the run would compare a model with itself.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from .spec import Ref

SHOWN_FILES = 3  # module files named when the migrated tree holds none of the model's code


class NotResolved(Exception):
    """A reference names no code the side may use; the message says where it looked."""


def inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


@dataclass(frozen=True)
class Resolver:
    side: str
    tree: Path  # the tree under test (resolved)
    other_tree: Path  # the other side's tree (resolved)
    spec_dir: Path  # the spec's directory (resolved)

    @classmethod
    def for_side(cls, side: str, tree: Path, other_tree: Path, spec: Path) -> "Resolver":
        return cls(side, Path(tree).resolve(), Path(other_tree).resolve(), Path(spec).resolve().parent)

    def locate(self, ref: Ref) -> Optional[Path]:
        """The file ``ref`` names for this side (None for a module reference that can be
        imported); raises ``NotResolved``."""
        if not ref.is_file:
            if _module_missing(ref.target):
                raise NotResolved(f"no module {ref.target} in the {self.side} tree {self.tree} nor elsewhere on sys.path")
            return None
        in_tree = self.tree / ref.target
        if in_tree.is_file():
            real = in_tree.resolve()
            if not inside(real, self.tree):
                raise NotResolved(f"{ref.target} in the {self.side} tree {self.tree} leads outside it (to {real})")
            return real
        beside = self.spec_dir / ref.target
        if not beside.is_file():
            raise NotResolved(f"{ref.target} not found in the {self.side} tree {self.tree} nor beside the spec in {self.spec_dir}")
        real = beside.resolve()
        if inside(real, self.other_tree) and not inside(real, self.tree):
            raise NotResolved(
                f"{ref.target} not found in the {self.side} tree {self.tree}; the one beside the spec ({real}) "
                f"lies in the other side's tree {self.other_tree} and cannot stand in for it"
            )
        if not inside(real, self.spec_dir) and not inside(real, self.tree):
            raise NotResolved(f"{ref.target} beside the spec leads outside the spec's directory (to {real})")
        return real

    def load(self, ref: Ref) -> Any:
        """The callable ``ref`` names, imported for this side."""
        if ref.is_file:
            path = self.locate(ref)
            parts = Path(ref.target).with_suffix("").parts
            if inside(path, self.tree) and all(part.isidentifier() for part in parts):
                module = importlib.import_module(".".join(parts))
            else:
                module = _import_file(path)
        else:
            module = importlib.import_module(ref.target)
        return functools.reduce(getattr, ref.attr.split("."), module)

    def code_problem(self, factory: Any, model: torch.nn.Module) -> Optional[str]:
        """Why the model has no code in this side's tree, or None when it has."""
        files = [_source_file(factory), *(_source_file(type(m)) for m in model.modules())]
        found = sorted({f for f in files if f is not None})
        if any(inside(f, self.tree) for f in found):
            return None
        shown = ", ".join(str(f) for f in found[:SHOWN_FILES]) + (", ..." if len(found) > SHOWN_FILES else "")
        return (f"the {self.side} tree {self.tree} holds none of the model's code: the factory and the model's classes "
                f"come from {shown or 'nowhere on disk'}, so this run would compare a model with itself")


def _module_missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except ModuleNotFoundError:
        return True
    except Exception:  # noqa: BLE001  (importing its package raised: the import stage reports that)
        return False


def _source_file(obj: Any) -> Optional[Path]:
    try:
        name = inspect.getsourcefile(inspect.unwrap(obj) if callable(obj) else obj)
    except (TypeError, OSError):
        return None
    return Path(name).resolve() if name else None


def _import_file(path: Path):
    """A harness file (or an in-tree file whose path is no module name), imported by its path;
    its directory goes on ``sys.path`` after the tree, for its own sibling imports."""
    name = "parity_" + re.sub(r"\W", "_", str(path.with_suffix("")))
    if name in sys.modules:
        return sys.modules[name]
    if str(path.parent) not in sys.path:
        sys.path.insert(1, str(path.parent))
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


