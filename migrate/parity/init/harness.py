"""What the harness ``parity init`` writes imports at run time (in each parity worker process).

``tree_module(path, package)``: the module of a file of the tree under test (``TREE``, set by the
parity worker, whose working directory is a scratch directory; the working directory otherwise). A file inside packages is imported by its
dotted name from the first directory above it that is no package. When the tree itself is a
package (``migrate run`` was given a package directory; its migrated copy has another name), it is
imported under the original package's name. When a package's ``__init__`` cannot be imported (it
pulls in an optional dependency the model does not need), the packages on the way are made bare
(their ``__init__`` not run) and the file is imported again, so its own relative imports work.

``Decode``: a KV-cache decode step as one module: the tokens but the last are prefilled, then the
last one is decoded against the cache; both steps' outputs are returned. ``style`` is the forward's
cache interface: ``hf`` (``past_key_values``/``use_cache``), ``start_pos`` (caches the model keeps,
Llama reference style), ``input_pos`` (``set_kv_cache`` then ``input_pos``, litgpt style).

``Padded``: a left-padded batch as one module: the first ``PADDED`` positions of the first row of
the sequence input are padding, and the forward is given the padding mask in the style it takes it
(``parity.init.masks``). The outputs are compared and trained on at the kept positions only (the
padded ones are zeroed: what a model computes for a padding query is no result).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any, List, Optional

import torch

TREE: Optional[Path] = None  # the tree under test of this process (set by the parity worker)


def _forget(top: str) -> None:
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        del sys.modules[name]


def _forget_tree(tree: Path) -> None:
    """Forget the modules of ``tree`` (files and bare packages) a failed import left behind."""
    root = str(tree.resolve())
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__path__", None)  # a bare package's list (a namespace path is left alone)
        where = getattr(module, "__file__", None) or (path[0] if isinstance(path, list) and path else None)
        if where and str(Path(where).resolve()).startswith(root) and not isinstance(module, StandIn):
            del sys.modules[name]


def _bare(names: List[str], location: Path) -> None:
    """Bare packages ``names[0]``, ``names[0].names[1]``, ... over ``location`` (the folder of
    ``names[0]``) and its subfolders."""
    for depth in range(1, len(names) + 1):
        name = ".".join(names[:depth])
        folder = location.joinpath(*names[1:depth])
        module = types.ModuleType(name)
        module.__path__ = [str(folder)]
        module.__package__ = name
        sys.modules[name] = module
        if depth > 1:
            setattr(sys.modules[".".join(names[: depth - 1])], names[depth - 1], module)


def _package(name: str, folder: Path) -> None:
    spec = importlib.util.spec_from_file_location(name, folder / "__init__.py", submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


KEPT = ("torch", "torch_npu", "npu_glue")  # never stood in: a side that cannot import these must fail
MAX_STAND_INS = 8


class StandIn(types.ModuleType):
    """A module that is not installed here, imported by a tree file at import time (torchaudio for
    data loading, xformers for a CUDA path): each attribute is an empty class of that name, so that
    imports, annotations, ``isinstance`` and subclassing work; building one raises
    ModuleNotFoundError naming the package. Both sides get the same stand-ins."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__path__ = []

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        value = type(attr, (), {"__module__": self.__name__, "__init__": _not_installed(self.__name__, attr)})
        setattr(self, attr, value)
        return value


def _not_installed(module: str, attr: str):
    def __init__(self, *args, **kwargs):
        raise ModuleNotFoundError(f"{module}.{attr} was called, but {module} is not installed here (parity init's "
                                  f"harness imported an empty stand-in for it): install it", name=module)
    return __init__


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self):
        self.tops: List[str] = []  # the packages stood in, in order

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.tops:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return StandIn(spec.name)

    def exec_module(self, module):
        pass


STAND_INS = _StandIns()


def _stand_in(error: ModuleNotFoundError, tree: Path) -> bool:
    """Stand in for the missing top-level package ``error`` names, unless it is one of ``KEPT``, a
    name of the tree, or one that is installed (a failure inside it is no missing module)."""
    top = (error.name or "").split(".")[0]
    if not top or top in KEPT or top in STAND_INS.tops or len(STAND_INS.tops) >= MAX_STAND_INS \
            or (tree / top).exists() or (tree / f"{top}.py").exists() or importlib.util.find_spec(top) is not None:
        return False
    if STAND_INS not in sys.meta_path:
        sys.meta_path.append(STAND_INS)
    STAND_INS.tops.append(top)
    return True


def tree_module(path: str, package: Optional[str] = None) -> types.ModuleType:
    """The module of the tree file ``path`` (see the module docstring); a package that is not
    installed here and that the tree imports at import time gets a ``StandIn``."""
    tree = TREE or Path.cwd()
    while True:
        try:
            return _tree_module(path, package)
        except ModuleNotFoundError as error:
            if not _stand_in(error, tree):
                raise
            _forget_tree(tree)


def _tree_module(path: str, package: Optional[str] = None) -> types.ModuleType:
    tree = TREE or Path.cwd()
    parts = list(Path(path).with_suffix("").parts)
    depth = len(parts) - 1  # folders above the file that are packages: count down to the first that is not
    while depth > 0 and (tree.joinpath(*parts[:depth]) / "__init__.py").is_file():
        depth -= 1
    as_package = depth == 0 and package is not None and (tree / "__init__.py").is_file()
    if as_package:
        names, location = [package, *parts], tree
    else:
        names, location = parts[depth:], tree.joinpath(*parts[:depth])
        if str(location) not in sys.path:
            sys.path.insert(1, str(location))
    dotted = ".".join(names)
    if dotted in sys.modules:
        return sys.modules[dotted]
    try:
        if as_package and names[0] not in sys.modules:
            _package(names[0], location)
        return importlib.import_module(dotted)
    except ImportError as error:
        if len(names) == 1:
            raise
        _forget(names[0])
        _bare(names[:-1], location if as_package else location / names[0])
        try:
            return importlib.import_module(dotted)
        except ImportError:
            raise error from None


class Decode(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, style: str, tokens: str):
        super().__init__()
        self.model, self.style, self.tokens = model, style, tokens

    def forward(self, **inputs: Any):
        ids = inputs.pop(self.tokens)
        prefix, last, length = ids[:, :-1], ids[:, -1:], ids.shape[1]
        if self.style == "hf":
            first = self.model(**{self.tokens: prefix}, use_cache=True, **inputs)
            past = first.past_key_values if hasattr(first, "past_key_values") else first[1]
            second = self.model(**{self.tokens: last}, past_key_values=past, use_cache=True)
        elif self.style == "start_pos":
            first = self.model(**{self.tokens: prefix}, start_pos=0, **inputs)
            second = self.model(**{self.tokens: last}, start_pos=length - 1)
        else:
            weight = next(self.model.parameters())
            self.model.set_kv_cache(batch_size=ids.shape[0], device=ids.device, dtype=weight.dtype)
            first = self.model(prefix, input_pos=torch.arange(length - 1, device=ids.device), **inputs)
            second = self.model(last, input_pos=torch.tensor([length - 1], device=ids.device))
        return _logits(first), _logits(second)


PADDED = 4  # padded positions at the start of the first row


class Padded(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, sequence: str, mask: str, style: str):
        super().__init__()
        self.model, self.sequence, self.mask, self.style = model, sequence, mask, style

    def forward(self, **inputs: Any):
        shape = inputs[self.sequence].shape[:2]
        keep = torch.ones(shape, dtype=torch.bool, device=inputs[self.sequence].device)
        keep[0, :PADDED] = False
        inputs[self.mask] = self._mask(keep)
        return _kept(_logits(self.model(**inputs)), keep)

    def _mask(self, keep: torch.Tensor) -> torch.Tensor:
        if self.style == "bool":
            return keep
        if self.style == "pad":
            return ~keep
        if self.style == "square":
            n = keep.shape[1]
            causal = torch.ones(n, n, dtype=torch.bool, device=keep.device).tril()
            return (causal & keep[:, None, :]) | torch.eye(n, dtype=torch.bool, device=keep.device)
        if self.style == "additive":
            weight = next(self.model.parameters())
            dtype = weight.dtype if weight.is_floating_point() else torch.float32
            additive = torch.zeros(keep.shape, dtype=dtype, device=keep.device)
            return additive.masked_fill(~keep, torch.finfo(dtype).min)[:, None, None, :]
        return keep.long()


def _kept(output: Any, keep: torch.Tensor) -> Any:
    """``output`` with the padded positions of every ``[B, N, ...]`` tensor zeroed."""
    if isinstance(output, torch.Tensor):
        if output.dim() >= 2 and output.shape[:2] == keep.shape:
            kept = keep.view(*keep.shape, *[1] * (output.dim() - 2))
            return torch.where(kept, output, torch.zeros((), dtype=output.dtype, device=output.device))
        return output
    if isinstance(output, (tuple, list)):
        return type(output)(_kept(item, keep) for item in output)
    return output


def _logits(output: Any) -> Any:
    """The tensors of a step's output (a cache object is no output)."""
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(output, (tuple, list)):
        return tuple(item for item in output if isinstance(item, torch.Tensor))
    return output
