"""Turning whatever a model returns into named tensors: flattening, selection, the live tensors."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Dict, Optional, Union

import torch


def flatten(obj: Any, prefix: str = "") -> Dict[str, torch.Tensor]:
    """Named tensors in ``obj``: tuples/lists by index, mappings (and HF ModelOutput) by key.

    Other objects (a KV cache, None, numbers) are skipped. Tensors are detached copies on the CPU,
    so later in-place updates on the device cannot change what was recorded.
    """
    found: Dict[str, torch.Tensor] = {}

    def walk(value: Any, name: str) -> None:
        if isinstance(value, torch.Tensor):
            found[name or "output"] = value.detach().to("cpu", copy=True)
        elif isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, f"{name}.{key}" if name else str(key))
        elif isinstance(value, (tuple, list)):
            for index, item in enumerate(value):
                walk(item, f"{name}.{index}" if name else str(index))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                walk(getattr(value, f.name), f"{name}.{f.name}" if name else f.name)

    walk(obj, prefix)
    return found


def select(output: Any, selector: Optional[Union[str, int]]) -> Any:
    """Apply the spec's ``output`` selector: an index, a key or an attribute."""
    if selector is None:
        return output
    if isinstance(output, Mapping) and selector in output:
        return output[selector]
    if isinstance(selector, int) or (isinstance(selector, str) and selector.lstrip("-").isdigit()):
        return output[int(selector)]
    if hasattr(output, str(selector)):
        return getattr(output, str(selector))
    raise KeyError(f"output selector {selector!r} matches no key, index or attribute of {type(output).__name__}")


def live_tensors(obj: Any):
    """Like ``flatten`` but yields the tensors themselves (still attached to the graph)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, Mapping):
        for item in obj.values():
            yield from live_tensors(item)
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from live_tensors(item)
