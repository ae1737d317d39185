"""Counting the aten ops that cost on a real NPU: device->host syncs and activation copies.

``OpCounter`` is a ``TorchDispatchMode`` that counts, per category, the ops dispatched while it is
active whose Python stack passes through one of ``trees`` and through none of ``excluded`` (the
emulator's own code: on hardware that work happens inside the kernel). Shared by the tests here
and ``benchmarks/npu_cost.py``.

- sync: ``aten::_local_scalar_dense`` (``bool(t)``, ``t.item()``), ``is_nonzero``, ``item``,
  ``equal`` (composites such as ``is_nonzero`` decompose before the mode sees them: one sync, one
  count).
- cat: ``aten::cat`` / ``stack`` (weight_cat: of parameters only, e.g. a concatenated weight).
- repeat: ``aten::repeat`` / ``repeat_interleave``, and a copy (``clone``, ``copy_``,
  ``_to_copy``, ``contiguous``) of an expanded tensor (a stride-0 dim of size > 1): the
  ``expand(...).reshape(...)`` of ``repeat_kv``.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SYNCS = {"_local_scalar_dense", "is_nonzero", "item", "equal"}
CATS = {"cat", "stack"}
REPEATS = {"repeat", "repeat_interleave"}
COPIES = {"clone", "copy_", "_to_copy", "contiguous"}


def _expanded(t) -> bool:
    return torch.is_tensor(t) and any(s == 0 and n > 1 for s, n in zip(t.stride(), t.shape))


def category(name: str, args) -> str | None:
    if name in SYNCS:
        return "sync"
    if name in CATS:
        weights = all(isinstance(t, torch.nn.Parameter) for t in args[0])
        return "weight_cat" if weights else "cat"
    if name in REPEATS or (name in COPIES and args and _expanded(args[-1] if name == "copy_" else args[0])):
        return "repeat"
    return None


class OpCounter(TorchDispatchMode):
    """``with OpCounter(trees, excluded) as c: ...``; then ``c.counts["sync"]`` and so on."""

    def __init__(self, trees: Iterable[Path], excluded: Iterable[Path] = ()):
        super().__init__()
        self.trees = tuple(str(Path(t).resolve()) for t in trees)
        self.excluded = tuple(str(Path(t).resolve()) for t in excluded)
        self.counts: Counter = Counter()
        self.ops: Counter = Counter()  # every attributed op by name
        self.where: Counter = Counter()  # (category, innermost file:line in the trees)

    def _attributed(self):
        """The innermost frame in the trees, or None when the stack misses them or passes the excluded."""
        frame, innermost = sys._getframe(2), None
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(self.excluded):
                return None
            if innermost is None and name.startswith(self.trees):
                innermost = f"{Path(name).name}:{frame.f_lineno}"
            frame = frame.f_back
        return innermost

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        kind = category(name, args)
        where = self._attributed()
        if where is not None:
            self.ops[name] += 1
            if kind is not None:
                self.counts[kind] += 1
                self.where[kind, where] += 1
        return func(*args, **(kwargs or {}))
