"""State changes between forward passes: every way a model's parameters and buffers change in use
that no version counter or address needs to see (spec key ``changes``, see docs/parity.md).

Migrated code that kept anything derived from a parameter or buffer (a concatenated weight, a
converted mask, a proof about a buffer's contents) from one call to the next would give a stale
result after one of these; parity catches it by running, on each side, for each change: a fresh
model with the case's weights, one forward (so that whatever a cache would hold is built), the
change, and the forward whose outputs are compared. The optimizer steps themselves (plain,
``foreach``, ``fused`` AdamW) are the training step's (spec key ``train``).

A change is the same on both sides: its new values come from generators seeded by the tensor's
name (the two models share their state dict's names), never from the order of the modules. It
returns False where the model has nothing it applies to (no buffer, no two parameters of one
shape); the case then records it as not applicable.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import torch

SCALE = 0.5  # the share of each parameter kept by a change; the rest is noise of its own size


@dataclass(frozen=True)
class Change:
    name: str
    what: str  # one line for the docs and the report
    apply: Callable[[torch.nn.Module], bool]
    prepare: Optional[Callable[[torch.nn.Module], None]] = None  # before the first forward


def _generator(name: str, salt: str) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(f"{salt}:{name}".encode()))


def _noise(name: str, like: torch.Tensor, salt: str) -> torch.Tensor:
    """Seeded noise of ``like``'s shape, dtype and device, about its size."""
    scale = float(like.detach().float().std()) if like.numel() > 1 else 0.0
    noise = torch.randn(like.shape, generator=_generator(name, salt)) * (scale or 0.02)
    return noise.to(device=like.device, dtype=like.dtype)


def _params(model: torch.nn.Module) -> List[Tuple[str, torch.nn.Parameter]]:
    """The floating parameters by name (sorted; a tied parameter once, under its first name)."""
    return sorted((n, p) for n, p in model.named_parameters() if p.is_floating_point())


def _owners(model: torch.nn.Module, param: torch.Tensor) -> Iterator[Tuple[torch.nn.Module, str]]:
    """Every (module, attribute) that holds ``param`` (more than one where it is tied)."""
    for module in model.modules():
        for attr, held in module._parameters.items():
            if held is param:
                yield module, attr


def _new(name: str, t: torch.Tensor, salt: str) -> torch.Tensor:
    """A new value for ``t``: half of it plus noise for a parameter or a float buffer; a mask-like
    buffer (only 0 and 1) opened up as a prefix-LM's: the first quarter of its last dim set."""
    if _mask_like(t):
        new = t.detach().clone()
        new[..., : max(1, t.shape[-1] // 4)] = 1
        return new
    return t.detach() * SCALE + _noise(name, t, salt)


def _mask_like(t: torch.Tensor) -> bool:
    if t.dtype == torch.bool:
        return True
    return t.is_floating_point() and t.numel() > 0 and bool(((t == 0) | (t == 1)).all())


def _buffers(model: torch.nn.Module) -> List[Tuple[str, torch.Tensor]]:
    """The buffers a change may write: floating or bool, not empty (sorted by name)."""
    return sorted((n, b) for n, b in model.named_buffers()
                  if b is not None and b.numel() and (b.is_floating_point() or b.dtype == torch.bool))


# -- the changes ------------------------------------------------------------------------------------
def data_write(model: torch.nn.Module) -> bool:
    """``p.data.copy_(...)``: EMA updates, hand-written optimizers, checkpoint loaders."""
    for name, p in _params(model):
        p.data.copy_(_new(name, p, "data"))
    return True


def foreach(model: torch.nn.Module) -> bool:
    """``torch._foreach_mul_`` / ``_foreach_add_``, as foreach optimizers update."""
    named = _params(model)
    params = [p for _, p in named]
    with torch.no_grad():
        torch._foreach_mul_(params, SCALE)
        torch._foreach_add_(params, [_noise(n, p, "foreach") for n, p in named])
    return True


def load_state_dict(model: torch.nn.Module) -> bool:
    """``load_state_dict`` of new values for every floating parameter and persistent buffer."""
    state = model.state_dict()
    new = {k: _new(k, v, "load") if (v.is_floating_point() or v.dtype == torch.bool) and v.numel() else v
           for k, v in state.items()}
    model.load_state_dict(new)
    return True


def nn_init(model: torch.nn.Module) -> bool:
    """``torch.nn.init.normal_`` of every floating parameter (re-initialisation, as fine-tuning recipes do)."""
    for name, p in _params(model):
        torch.nn.init.normal_(p, std=0.02, generator=_generator(name, "init"))
    return True


def set_(model: torch.nn.Module) -> bool:
    """``p.set_(new)``: the parameter's storage replaced in place."""
    with torch.no_grad():
        for name, p in _params(model):
            p.set_(_new(name, p, "set").clone())
    return True


def tie(model: torch.nn.Module) -> bool:
    """Weight tying: the second of the first two same-shape parameters of different modules becomes
    the first one (``lm_head.weight = embed.weight``, or an MLP's ``up.weight = gate.weight``)."""
    named = _params(model)
    for i, (first_name, first) in enumerate(named):
        for name, p in named[i + 1:]:
            if p.shape == first.shape and p.dtype == first.dtype and p is not first:
                for module, attr in list(_owners(model, p)):
                    setattr(module, attr, first)
                return True
    return False


def half_round_trip(model: torch.nn.Module) -> bool:
    """``model.half()``, then back to the run's dtype: every floating parameter and buffer swapped for a
    new tensor (``Module._apply``), its values rounded to float16."""
    dtype = next(p.dtype for _, p in _params(model))
    model.half()
    model._apply(lambda t: t.to(dtype) if t.is_floating_point() else t)
    return True


def parameter_swap(model: torch.nn.Module) -> bool:
    """FSDP-style: every parameter replaced by a new ``nn.Parameter`` object (a tied one stays tied)."""
    for name, p in _params(model):
        swapped = torch.nn.Parameter(_new(name, p, "swap"), requires_grad=p.requires_grad)
        for module, attr in list(_owners(model, p)):
            setattr(module, attr, swapped)
    return True


def _flatten(model: torch.nn.Module) -> None:
    """FSDP1 (``use_orig_params``) layout: each parameter's ``.data`` a view into one flat tensor per
    dtype and device."""
    groups: Dict[Tuple[torch.dtype, torch.device], List[Tuple[str, torch.nn.Parameter]]] = {}
    for name, p in _params(model):
        groups.setdefault((p.dtype, p.device), []).append((name, p))
    model._npu_migrate_flat = []
    for named in groups.values():
        flat = torch.cat([p.detach().reshape(-1) for _, p in named])
        offset = 0
        for _, p in named:
            p.data = flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        model._npu_migrate_flat.append((flat, named))


def flat_write(model: torch.nn.Module) -> bool:
    """The flat tensor under the parameters written in place (as an all-gather fills it): no
    parameter's version counter, identity or address changes."""
    for flat, named in model._npu_migrate_flat:
        with torch.no_grad():
            flat.copy_(torch.cat([_new(name, p, "flat").reshape(-1) for name, p in named]))
    return True


def buffer_fill(model: torch.nn.Module) -> bool:
    """Buffers changed in place: a mask-like one filled with 1 (a prefix-LM opening its causal
    mask), others scaled."""
    buffers = _buffers(model)
    with torch.no_grad():
        for _, b in buffers:
            b.fill_(1) if _mask_like(b) else b.mul_(1.25)
    return bool(buffers)


def buffer_data(model: torch.nn.Module) -> bool:
    """Buffers written through ``.data`` (the version counter stays): new values as ``load_state_dict``
    would bring, for non-persistent buffers too."""
    buffers = _buffers(model)
    for name, b in buffers:
        b.data.copy_(_new(name, b, "buffer"))
    return bool(buffers)


CHANGES: Dict[str, Change] = {c.name: c for c in (
    Change("data-write", "every parameter written through .data (EMA, loaders)", data_write),
    Change("foreach", "torch._foreach_mul_/_foreach_add_ on the parameters", foreach),
    Change("load-state-dict", "new parameters and persistent buffers loaded", load_state_dict),
    Change("nn-init", "torch.nn.init.normal_ of every parameter", nn_init),
    Change("set", "Tensor.set_ of every parameter", set_),
    Change("tie", "two same-shape parameters tied", tie),
    Change("half-round-trip", "model.half() and back", half_round_trip),
    Change("parameter-swap", "every Parameter object replaced (FSDP-style)", parameter_swap),
    Change("flat-write", "parameters as views of one flat tensor, written in place (FSDP1)", flat_write, _flatten),
    Change("buffer-fill", "buffers filled / scaled in place (a causal mask opened)", buffer_fill),
    Change("buffer-data", "buffers written through .data", buffer_data),
)}
