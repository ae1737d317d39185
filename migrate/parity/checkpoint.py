"""A case's ``weights: PATH``: a local checkpoint, loaded strictly into the original model.

PATH is a file or a Hugging Face-style directory; nothing is ever downloaded.

- ``*.safetensors``: read with ``safetensors``.
- any other file: ``torch.load(weights_only=True)`` (no pickled code runs): a mapping of names to
  tensors, or a mapping whose only tensor mapping sits under ``state_dict``, ``model`` or
  ``module`` (how training scripts save a checkpoint with its optimizer state).
- a directory: ``model.safetensors`` or ``pytorch_model.bin``, or their sharded form
  (``model.safetensors.index.json`` / ``pytorch_model.bin.index.json`` and the shards its
  ``weight_map`` names, which must lie in the directory).

A Hugging Face directory (``config.json`` beside the weights) loaded into a transformers model is
read by that model class's own ``from_pretrained`` (local files only), so the conversions
transformers applies on load (per-expert MoE weights fused into one tensor, renamed keys) apply;
its loading report must show no missing, unexpected or mismatched key.

Loading is strict: every key of the model's ``state_dict`` must be in the checkpoint, except a
tied parameter whose twin is (Hugging Face checkpoints leave out ``lm_head.weight`` when it is the
embedding), no checkpoint key may be left over, and shapes must match. The values are cast into
the model's dtypes, and the original's state is then copied into the migrated model as for
random weights.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Dict, List

import torch

HF_FILES = ("model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json", "pytorch_model.bin")
WRAPPER_KEYS = ("state_dict", "model", "module")
LISTED = 5  # names listed per kind of problem


class CheckpointError(Exception):
    """The checkpoint cannot be read or does not fit the model; the message says why."""


def read_checkpoint(path: Path) -> Dict[str, torch.Tensor]:
    """The tensors of the checkpoint at ``path`` (a file or a directory), on the CPU."""
    path = Path(path)
    if path.is_dir():
        return _read_directory(path)
    if not path.is_file():
        raise CheckpointError(f"{path} is not a file or directory (nothing is downloaded)")
    if path.suffix == ".safetensors":
        return _read_safetensors(path)
    return _read_torch(path)


def _read_directory(folder: Path) -> Dict[str, torch.Tensor]:
    for name in HF_FILES:
        candidate = folder / name
        if not candidate.is_file():
            continue
        if not name.endswith(".index.json"):
            return read_checkpoint(candidate)
        try:
            weight_map = json.loads(candidate.read_text())["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"{candidate}: not a checkpoint index with a weight_map ({exc})") from None
        state: Dict[str, torch.Tensor] = {}
        for shard in shards:
            shard_path = (folder / shard).resolve()
            if folder.resolve() not in shard_path.parents:
                raise CheckpointError(f"{candidate}: shard {shard!r} lies outside {folder}")
            state.update(read_checkpoint(shard_path))
        return state
    raise CheckpointError(f"{folder} holds no checkpoint: looked for {', '.join(HF_FILES)}")


def _read_safetensors(path: Path) -> Dict[str, torch.Tensor]:
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise CheckpointError(f"{path}: reading .safetensors needs the safetensors package (pip install safetensors)") from None
    try:
        return load_file(str(path), device="cpu")
    except Exception as exc:  # noqa: BLE001  (safetensors raises its own error types)
        raise CheckpointError(f"{path}: not a readable safetensors file ({type(exc).__name__}: {exc})") from None


def _read_torch(path: Path) -> Dict[str, torch.Tensor]:
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001  (unpickling errors come in many types)
        raise CheckpointError(f"{path}: not a torch.save checkpoint loadable with weights_only=True "
                              f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    if _is_state(loaded):
        return dict(loaded)
    if isinstance(loaded, Mapping):
        nested = [k for k in WRAPPER_KEYS if _is_state(loaded.get(k))]
        if len(nested) == 1:
            return dict(loaded[nested[0]])
    raise CheckpointError(f"{path}: holds no state_dict (a mapping of names to tensors, possibly under "
                          f"{' / '.join(WRAPPER_KEYS)})")


def _is_state(value) -> bool:
    return isinstance(value, Mapping) and bool(value) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items()
    )


def load_checkpoint(model: torch.nn.Module, path: Path) -> None:
    """The checkpoint at ``path`` loaded strictly into ``model`` (see the module docstring)."""
    path = Path(path)
    if path.is_dir() and (path / "config.json").is_file() and _is_transformers_model(model):
        load_strictly(model, _from_pretrained(model, path), path)
    else:
        load_strictly(model, read_checkpoint(path), path)


def _is_transformers_model(model: torch.nn.Module) -> bool:
    return any(c.__module__.startswith("transformers.") and c.__name__ == "PreTrainedModel" for c in type(model).__mro__)


def _from_pretrained(model: torch.nn.Module, folder: Path) -> Dict[str, torch.Tensor]:
    """The state ``type(model).from_pretrained(folder)`` builds, with transformers' on-load conversions."""
    try:
        loaded, info = type(model).from_pretrained(str(folder), config=model.config, local_files_only=True,
                                                   output_loading_info=True)
    except Exception as exc:  # noqa: BLE001  (transformers raises many kinds)
        raise CheckpointError(f"{folder}: from_pretrained failed ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    problems = [f"{what} ({len(keys)}): {', '.join(map(str, list(keys)[:LISTED]))}{', ...' if len(keys) > LISTED else ''}"
                for what, keys in (("missing in the checkpoint", info.get("missing_keys") or []),
                                   ("not in the model", info.get("unexpected_keys") or []),
                                   ("shape mismatch", info.get("mismatched_keys") or [])) if keys]
    if problems:
        raise CheckpointError(f"the weights {folder} do not fit the original model: " + "; ".join(problems))
    return loaded.state_dict()


def load_strictly(model: torch.nn.Module, state: Dict[str, torch.Tensor], source: Path) -> None:
    """Load ``state`` into ``model``; raises ``CheckpointError`` naming every misfit."""
    own = model.state_dict(keep_vars=True)
    twins: Dict[int, List[str]] = {}
    for key, tensor in own.items():
        twins.setdefault(id(tensor), []).append(key)
    missing = [k for k in own if k not in state and not any(t in state for t in twins[id(own[k])])]
    unexpected = [k for k in state if k not in own]
    shapes = [f"{k}: checkpoint {tuple(state[k].shape)}, model {tuple(own[k].shape)}"
              for k in own if k in state and state[k].shape != own[k].shape]
    problems = [f"{what} ({len(keys)}): {', '.join(keys[:LISTED])}{', ...' if len(keys) > LISTED else ''}"
                for what, keys in (("missing in the checkpoint", missing), ("not in the model", unexpected),
                                   ("shape mismatch", shapes)) if keys]
    if problems:
        raise CheckpointError(f"the weights {source} do not fit the original model: " + "; ".join(problems))
    with torch.no_grad():
        model.load_state_dict(state, strict=False)
