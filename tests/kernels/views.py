"""Views with other strides, for the tests that run the emulated ops on views.

``view(t, kind)`` is a new tensor with ``t``'s shape and dtype laid out as ``kind`` says, in fresh
storage (so the caller's tensors are never shared):

* ``transpose``: the last two dims swapped in memory (``x.transpose(-1, -2)`` of a contiguous x);
* ``permute``: every dim reversed in memory (``x.permute(3, 2, 1, 0)``);
* ``step``: every other element of a row twice as long (``x[..., ::2]``);
* ``narrow``: rows cut from wider rows at an offset (``qkv.narrow(-1, 3, d)``, a fused projection's slice);
* ``offset``: contiguous, at a storage offset (``buffer.narrow(0, 3, n)``, a slice of a cache);
* ``as_strided``: column-major with a gap after every dim and a storage offset (``as_strided``);
* ``expand``: the first slice along the first dim longer than 1, broadcast over that dim with
  stride 0 (``x[:1].expand(...)``). Only this kind changes the values: the tests compare the op on
  the view with the op on ``view.contiguous()``, never with ``t``.

A kind that a tensor's rank (or, for ``expand``, its shape) does not allow gives None.
"""

from __future__ import annotations

from typing import Optional

import torch

KINDS = ("transpose", "permute", "step", "narrow", "offset", "as_strided", "expand")


def _into(t: torch.Tensor, make) -> torch.Tensor:
    """The empty view that ``make()`` builds, filled with t's values."""
    out = make()
    out.copy_(t)
    return out


def view(t: torch.Tensor, kind: str) -> Optional[torch.Tensor]:
    t = t.detach()
    shape, n = tuple(t.shape), t.dim()
    if kind == "transpose":
        return None if n < 2 else _into(t, lambda: t.new_empty(*shape[:-2], shape[-1], shape[-2]).transpose(-1, -2))
    if kind == "permute":
        order = tuple(reversed(range(n)))
        return None if n < 2 else _into(t, lambda: t.new_empty([shape[i] for i in order]).permute(order))
    if kind == "step":
        return None if n < 1 else _into(t, lambda: t.new_empty(*shape[:-1], 2 * shape[-1])[..., ::2])
    if kind == "narrow":
        return None if n < 1 else _into(t, lambda: t.new_empty(*shape[:-1], shape[-1] + 5).narrow(-1, 3, shape[-1]))
    if kind == "offset":
        return None if n < 1 else _into(t, lambda: t.new_empty(shape[0] + 3, *shape[1:]).narrow(0, 3, shape[0]))
    if kind == "as_strided":
        if n < 1:
            return None
        strides, size = [], 1
        for s in shape:  # column-major, one element of gap after every dim
            strides.append(size)
            size *= s + 1
        return _into(t, lambda: t.new_empty(size + 7).as_strided(shape, strides, 7))
    if kind == "expand":
        dim = next((d for d, s in enumerate(shape) if s > 1), None)
        return None if dim is None else t.narrow(dim, 0, 1).clone().expand(shape)
    raise ValueError(kind)


def changes_values(kind: str) -> bool:
    return kind == "expand"
