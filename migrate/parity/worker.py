"""One side of a parity run, in a process of its own: ``python -m npu_migrate.migrate.parity.worker REQUEST``.

REQUEST is a JSON file ``{"side", "tree", "spec", "backing", "result"}``. The worker activates the
emulation for its side (the original: CUDA calls mapped onto the backing device; the migrated:
the emulated NPU), puts its tree root first on ``sys.path``, runs every case and dtype of the spec
and ``torch.save``s plain dicts of tensors to ``result``. The original side also ships the weights
and inputs; the migrated side reads the path of that file from stdin, so its start-up overlaps
the original's run. A case that fails becomes an ``error`` string, never a crash of the worker.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import re
import sys
import traceback
from collections.abc import Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
from torch.utils._pytree import tree_map

from npu_migrate.migrate.parity.coverage import OpTrace
from npu_migrate.migrate.parity.localise import ModuleRecorder
from npu_migrate.migrate.parity.outputs import flatten, scalar_loss, select
from npu_migrate.migrate.parity.spec import Case, Ref, TensorSpec, load_spec

SEED = 0  # the model and the inputs are built from this seed
LEARNING_RATE = 0.01  # the one SGD step of train cases
TRACEBACK_FRAMES = 3


class CaseFailure(Exception):
    """A stage of a case failed; the message says which and why."""


@contextmanager
def stage(what: str):
    """Turn any exception in the block into a ``CaseFailure`` with the traceback's tail."""
    try:
        yield
    except CaseFailure:
        raise
    except BaseException as exc:  # noqa: BLE001  (user code may raise anything, even SystemExit)
        if isinstance(exc, KeyboardInterrupt):
            raise
        lines = traceback.format_exception(exc)
        tail = "".join(lines[-(TRACEBACK_FRAMES + 1):]).rstrip()
        raise CaseFailure(f"{what}: {type(exc).__name__}: {exc}\n{tail}") from None


# -- the emulation ------------------------------------------------------------------------------
def activate(side: str, backing: str, trace: Optional[OpTrace]) -> None:
    from npu_migrate import kernels

    if side == "migrated":
        kernels.activate(backing)
        torch_npu = sys.modules.get("torch_npu")
        if trace is not None and torch_npu is not None and getattr(torch_npu, "emulated", False):
            from npu_migrate.kernels.registry import load_all

            for name in load_all():
                if hasattr(torch_npu, name):
                    setattr(torch_npu, name, trace.wrap_fused(name, getattr(torch_npu, name)))
    else:
        kernels.activate_cuda(backing)


def device_for(backing: str) -> torch.device:
    """Both sides put the model and the inputs on the backing device; the emulation maps the
    device calls inside the model code (``.cuda()``, ``.npu()``) onto the same device."""
    return torch.device(backing)


# -- resolving spec references inside a tree ----------------------------------------------------
def resolve(ref: Ref, tree: Path) -> Any:
    """The callable ``ref`` names, imported from ``tree`` (which is first on sys.path)."""
    if ref.is_file:
        path = tree / ref.target
        if not path.is_file():
            raise FileNotFoundError(f"{ref.target} not found in {tree}")
        parts = Path(ref.target).with_suffix("").parts
        if all(part.isidentifier() for part in parts):
            module = importlib.import_module(".".join(parts))
        else:
            module = _import_file(path)
    else:
        module = importlib.import_module(ref.target)
    return functools.reduce(getattr, ref.attr.split("."), module)


def _import_file(path: Path):
    name = "parity_" + re.sub(r"\W", "_", path.stem)
    if name in sys.modules:
        return sys.modules[name]
    sys.path.insert(1, str(path.parent))
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return module


# -- inputs ---------------------------------------------------------------------------------------
def declared_inputs(specs: Dict[str, TensorSpec], dtype: torch.dtype) -> Dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(SEED)
    inputs = {}
    for name, spec in specs.items():
        target = dtype if spec.dtype == "float" else getattr(torch, spec.dtype)
        if target.is_floating_point:
            if spec.low is None and spec.high is None:
                value = torch.randn(spec.shape, generator=generator)
            else:
                low = 0.0 if spec.low is None else spec.low
                high = low + 1.0 if spec.high is None else spec.high
                value = torch.rand(spec.shape, generator=generator) * (high - low) + low
            inputs[name] = value.to(target)
        elif target == torch.bool:
            inputs[name] = torch.randint(0, 2, spec.shape, generator=generator).bool()
        else:
            low = int(spec.low or 0)
            inputs[name] = torch.randint(low, int(spec.high), spec.shape, generator=generator, dtype=target)
    return inputs


def make_inputs(case: Case, dtype: torch.dtype, tree: Path) -> Any:
    if isinstance(case.inputs, Ref):
        with stage(f"cannot import the inputs callable {case.inputs}"):
            fn = resolve(case.inputs, tree)
        with stage(f"the inputs callable {case.inputs} raised"):
            return fn(seed=SEED, dtype=dtype)
    return declared_inputs(case.inputs, dtype)


def _to(inputs: Any, device: torch.device) -> Any:
    return tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, inputs)


def call(model: torch.nn.Module, inputs: Any) -> Any:
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


# -- weights --------------------------------------------------------------------------------------
def load_weights(model: torch.nn.Module, state: Dict[str, torch.Tensor]) -> List[str]:
    """Load the original's weights strictly; the problems by name, or [] when loaded."""
    own = model.state_dict()
    problems = [f"missing in the original's weights: {k}" for k in own if k not in state]
    problems += [f"unexpected (not in the migrated model): {k}" for k in state if k not in own]
    problems += [
        f"shape mismatch: {k}: original {tuple(state[k].shape)}, migrated {tuple(own[k].shape)}"
        for k in own
        if k in state and own[k].shape != state[k].shape
    ]
    if not problems:
        model.load_state_dict(state, strict=True)
    return problems


# -- one case ---------------------------------------------------------------------------------------
def build(case: Case, dtype: torch.dtype, tree: Path, device: torch.device) -> torch.nn.Module:
    with stage(f"cannot import the factory {case.factory}"):
        factory = resolve(case.factory, tree)
    with stage(f"the factory {case.factory} raised"):
        torch.manual_seed(SEED)
        model = factory(**case.kwargs)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"expected an nn.Module, got {type(model).__name__}")
        return model.to(device=device, dtype=dtype)


def forward(model: torch.nn.Module, inputs: Any, case: Case) -> Dict[str, Any]:
    model.eval()
    recorder = ModuleRecorder(model)
    try:
        with stage("the forward pass raised"), torch.no_grad():
            torch.manual_seed(SEED)
            output = call(model, inputs)
    finally:
        recorder.remove()
    with stage("the output selector failed"):
        outputs = flatten(select(output, case.output))
    return {"outputs": outputs, "modules": recorder.calls}


def train_step(model: torch.nn.Module, inputs: Any, case: Case) -> Dict[str, Any]:
    """Gradients of a scalar loss, then the outputs after one SGD step."""
    with stage("the training step raised"):
        model.train()
        model.zero_grad(set_to_none=True)
        torch.manual_seed(SEED)
        loss = scalar_loss(select(call(model, inputs), case.output))
        loss.backward()
        grads = {n: p.grad.detach().to("cpu", copy=True) for n, p in model.named_parameters() if p.grad is not None}
        with torch.no_grad():  # one plain SGD step (torch.optim would import torch._dynamo: seconds)
            for p in model.parameters():
                if p.grad is not None:
                    p.add_(p.grad, alpha=-LEARNING_RATE)
        model.eval()
        with torch.no_grad():
            torch.manual_seed(SEED)
            after = flatten(select(call(model, inputs), case.output))
    return {"loss": loss.detach().to("cpu"), "grads": grads, "after_step": after}


def run_case(case: Case, dtype_name: str, side: str, tree: Path, backing: str,
             original: Optional[dict], trace: Optional[OpTrace]) -> Dict[str, Any]:
    dtype = getattr(torch, dtype_name)
    device = device_for(backing)
    result: Dict[str, Any] = {"error": None, "weight_problems": []}
    try:
        model = build(case, dtype, tree, device)
        if original is None:
            result["state"] = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            inputs = make_inputs(case, dtype, tree)
            if isinstance(inputs, Mapping):  # e.g. a tokenizer's BatchEncoding: ship a plain dict
                inputs = dict(inputs)
            result["inputs"] = _to(inputs, torch.device("cpu"))
        else:
            with stage("loading the original's weights failed"):
                result["weight_problems"] = load_weights(model, original["state"])
            if result["weight_problems"]:
                return result
            inputs = original["inputs"]
        inputs = _to(inputs, device)
        with trace.recording() if trace is not None else nullcontext():
            result.update(forward(model, inputs, case))
            if case.train:
                result["train"] = train_step(model, inputs, case)
        if trace is not None:
            result["coverage"] = trace.to_json()
    except CaseFailure as failure:
        result["error"] = str(failure)
    return result


def run(request: Dict[str, Any], original_results: Optional[dict]) -> Dict[str, Any]:
    side, tree, backing = request["side"], Path(request["tree"]), request["backing"]
    trace = OpTrace() if side == "migrated" else None
    try:
        with stage(f"cannot activate the emulation (backing {backing})"):
            activate(side, backing, trace)
    except CaseFailure as failure:
        return {"fatal": str(failure)}
    sys.path.insert(0, str(tree))
    os.chdir(tree)
    spec = load_spec(Path(request["spec"]))
    results: Dict[str, Any] = {}
    for case in spec.cases:
        for dtype in case.dtypes:
            original = None
            if original_results is not None:
                original = original_results.get("cases", {}).get(case.name, {}).get(dtype)
                if original is None or original["error"] or "state" not in original:
                    results.setdefault(case.name, {})[dtype] = {"error": None, "skipped": True}
                    continue
            results.setdefault(case.name, {})[dtype] = run_case(case, dtype, side, tree, backing, original, trace)
    return {"cases": results}


def main(argv: List[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    original_results = None
    if request["side"] == "migrated":
        path = sys.stdin.readline().strip()
        if not path:  # the original side failed as a whole: nothing to compare against
            return 0
        original_results = torch.load(path, weights_only=True)
    torch.save(run(request, original_results), request["result"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
