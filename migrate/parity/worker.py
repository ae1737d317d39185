"""One side of a parity run, in a process of its own: ``python -m npu_migrate.migrate.parity.worker REQUEST``.

REQUEST is a JSON file ``{"side", "tree", "other_tree", "spec", "backing", "runs", "tmp",
"progress"}``. The worker activates the emulation for its side (the original: CUDA calls mapped
onto the backing device; the migrated: the emulated NPU), puts its tree root first on ``sys.path``
(its working directory is a scratch directory of the run: ``parity.process``), and runs cases:
the original side the runs (case and dtype or AMP, numbered as ``spec_runs``) its request lists,
the migrated side each run named on its standard input with the original's result for it, as the
original side finishes them, so the two overlap. Each run's plain dict of tensors is
``torch.save``d to ``<tmp>/<side>.<run>.pt``, and the progress file says which run starts and
ends (the parent stops a run that exceeds its time limit). The original side also ships the
weights and inputs. A case that fails becomes an ``error`` string (with ``raised_in`` when a
forward raised, ``not_supported`` when the emulation cannot run it), never a crash of the worker.
The migrated side also ships, per run, what ran at each rewritten site and the tree's files it
imported (``parity.sites``).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import torch
from torch.utils._pytree import tree_map

from . import sites, training
from .changes import CHANGES
from .checkpoint import load_checkpoint
from .coverage import OpTrace
from .failures import SETUP, CaseFailure, raised_where, stage
from .init import harness
from .localise import ModuleRecorder
from .outputs import flatten, select
from .precision import Precision, cast_floating, precision
from .process import DONE, READY, START, progress_line
from .resolve import NotResolved, Resolver
from .spec import Case, Ref, TensorSpec, load_spec

SEED = 0  # the model and the inputs are built from this seed


# -- the emulation ------------------------------------------------------------------------------
def activate(side: str, backing: str, trace: Optional[OpTrace]) -> None:
    from ... import kernels

    if side == "migrated":
        kernels.activate(backing)
        torch_npu = sys.modules.get("torch_npu")
        if trace is not None and torch_npu is not None and getattr(torch_npu, "emulated", False):
            from ...kernels.registry import load_all

            for name in load_all():
                fn = getattr(torch_npu, name, None)
                # a dispatcher op (torch.ops.npu.*) is counted where it dispatches: no wrapper
                if fn is not None and not isinstance(fn, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
                    setattr(torch_npu, name, trace.wrap_fused(name, fn))
    else:
        kernels.activate_cuda(backing)


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


def load_ref(resolver: Resolver, ref: Ref, what: str) -> Any:
    try:
        resolver.locate(ref)
    except NotResolved as exc:
        raise CaseFailure(f"cannot find the {what} {ref}: {exc}", kind=SETUP) from None
    with stage(f"cannot import the {what} {ref}"):
        return resolver.load(ref)


def make_inputs(case: Case, dtype: torch.dtype, resolver: Resolver) -> Any:
    if isinstance(case.inputs, Ref):
        fn = load_ref(resolver, case.inputs, "inputs callable")
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


# -- one case ---------------------------------------------------------------------------------------
def build(case: Case, prec: Precision, resolver: Resolver, device: torch.device) -> torch.nn.Module:
    """The side's model: built from the seed, the checkpoint loaded (original side), on ``device``,
    floating tensors in the run's weight dtype."""
    factory = load_ref(resolver, case.factory, "factory")
    with stage(f"the factory {case.factory} raised"):
        torch.manual_seed(SEED)
        model = factory(**case.kwargs)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"expected an nn.Module, got {type(model).__name__}")
    if resolver.side == "migrated":
        problem = resolver.code_problem(factory, model)
        if problem:
            raise CaseFailure(problem, kind=SETUP)
    if case.weights is not None and resolver.side == "original":
        with stage("loading the weights failed", kind=SETUP):
            load_checkpoint(model, case.weights)
    with stage("moving the model to the device failed"):
        return cast_floating(model.to(device=device), prec.weights)


def forward(model: torch.nn.Module, inputs: Any, case: Case, prec: Precision, side: str,
            trace: Optional[OpTrace], tree: Path) -> Dict[str, Any]:
    model.eval()
    recorder = ModuleRecorder(model)
    locate = functools.partial(raised_where, side=side, recorder=recorder, trace=trace, tree=tree)
    try:
        with stage("the forward pass raised", locate=locate), torch.no_grad(), prec.autocast(side):
            torch.manual_seed(SEED)
            output = call(model, inputs)
    finally:
        recorder.remove()
    with stage("the output selector failed"):
        outputs = flatten(select(output, case.output))
    return {"outputs": outputs, "modules": recorder.calls}


def train_runs(fresh, inputs: Any, case: Case, prec: Precision, side: str, trace: Optional[OpTrace],
               tree: Path) -> Dict[str, Any]:
    """Each optimizer of the case's training, from the case's weights (``fresh()``): ``steps`` steps on
    the case's loss (scaled with a GradScaler under float16 AMP). Recorded: every step's loss, the
    gradients of the first step (the same for every optimizer), the outputs after the last step."""
    plan = case.train
    result: Dict[str, Dict[str, torch.Tensor]] = {"loss": {}, "grads": {}, "after_step": {}}
    for index, name in enumerate(plan.optimizers):
        model = fresh()
        recorder = ModuleRecorder(model, keep_tensors=False)
        locate = functools.partial(raised_where, side=side, recorder=recorder, trace=trace, tree=tree)
        try:
            with stage(f"the training step ({name}) raised", locate=locate):
                model.train()
                optimizer = training.OPTIMIZERS[name](model.parameters(), plan.lr)
                scaler = prec.grad_scaler(side)
                for step in range(1, plan.steps + 1):
                    optimizer.zero_grad(set_to_none=True)
                    torch.manual_seed(SEED + step)
                    with prec.autocast(side):
                        loss = training.loss(select(call(model, inputs), case.output), plan.loss)
                    if scaler is None:
                        loss.backward()
                    else:
                        scaler.scale(loss).backward()
                        scaler.unscale_(optimizer)
                    if index == 0 and step == 1:
                        result["grads"] = _grads(model)
                    result["loss"][f"{name}/step{step}"] = loss.detach().to("cpu")
                    if scaler is None:
                        optimizer.step()
                    else:
                        scaler.step(optimizer)
                        scaler.update()
                model.eval()
                with torch.no_grad(), prec.autocast(side):
                    torch.manual_seed(SEED)
                    after = flatten(select(call(model, inputs), case.output))
                result["after_step"].update({f"{name}/{key}": value for key, value in after.items()})
        finally:
            recorder.remove()
    return result


def change_runs(fresh, inputs: Any, case: Case, prec: Precision, side: str, trace: Optional[OpTrace],
                tree: Path) -> Dict[str, Any]:
    """Each state change of the case (``parity.changes``) on a model with the case's weights: a forward
    (whatever a cache would keep is built), the change, then the forward whose outputs are compared."""
    outputs: Dict[str, torch.Tensor] = {}
    not_applicable: List[str] = []
    for name in case.changes:
        change = CHANGES[name]
        model = fresh().eval()
        with stage(f"the state change {name} raised"):
            if change.prepare is not None:
                change.prepare(model)
            with torch.no_grad(), prec.autocast(side):
                torch.manual_seed(SEED)
                call(model, inputs)
            applied = change.apply(model)
        if not applied:
            not_applicable.append(name)
            continue
        recorder = ModuleRecorder(model, keep_tensors=False)
        locate = functools.partial(raised_where, side=side, recorder=recorder, trace=trace, tree=tree)
        try:
            with stage(f"the forward pass after the state change {name} raised", locate=locate), torch.no_grad(), \
                    prec.autocast(side):
                torch.manual_seed(SEED)
                after = flatten(select(call(model, inputs), case.output))
        finally:
            recorder.remove()
        outputs.update({f"{name}/{key}": value for key, value in after.items()})
    return {"outputs": outputs, "not_applicable": not_applicable}


def _grads(model: torch.nn.Module) -> Dict[str, torch.Tensor]:
    return {n: p.grad.detach().to("cpu", copy=True) for n, p in model.named_parameters() if p.grad is not None}


def run_case(case: Case, label: str, resolver: Resolver, backing: str,
             original: Optional[dict], trace: Optional[OpTrace]) -> Dict[str, Any]:
    prec = precision(label)
    device = torch.device(backing)  # the emulation maps .cuda()/.npu() in the model onto it too
    side = resolver.side
    result: Dict[str, Any] = {"error": None, "weight_problems": []}
    if trace is not None:
        trace.reset()
    if side == "migrated":
        sites.reset_counts()
    try:
        model = build(case, prec, resolver, device)
        if original is None:
            result["state"] = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            inputs = make_inputs(case, prec.weights, resolver)
            if isinstance(inputs, Mapping):  # e.g. a tokenizer's BatchEncoding: ship a plain dict
                inputs = dict(inputs)
            result["inputs"] = _to(inputs, torch.device("cpu"))
        else:
            with stage("loading the original's weights failed"):
                result["weight_problems"] = weight_problems(model, original["state"])
            if result["weight_problems"]:
                return result
            inputs = original["inputs"]
        inputs = _to(inputs, device)

        def fresh() -> torch.nn.Module:
            """A new model with the weights this side compared (the original's, on both sides)."""
            again = build(case, prec, resolver, device)
            again.load_state_dict((original or result)["state"], strict=True)
            return again

        with trace.recording() if trace is not None else nullcontext():
            result.update(forward(model, inputs, case, prec, side, trace, resolver.tree))
            if case.train:
                result["train"] = train_runs(fresh, inputs, case, prec, side, trace, resolver.tree)
            if case.changes:
                result["changes"] = change_runs(fresh, inputs, case, prec, side, trace, resolver.tree)
        if trace is not None:
            result["coverage"] = trace.to_json()
    except CaseFailure as failure:
        result.update(failure.for_side(side).to_json())
        if trace is not None:  # what ran before the failure
            result["coverage"] = trace.to_json()
    if side == "migrated":  # what ran at each rewritten site, and which of the tree's files were imported
        result["sites"], result["loaded"] = sites.take_counts(), sites.loaded_files(resolver.tree)
    return result


def weight_problems(model: torch.nn.Module, state: Dict[str, torch.Tensor]) -> List[str]:
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


def spec_runs(spec) -> List[tuple]:
    """Every ``(case, run label)`` of a spec, in order: run ``I`` of a parity run is ``spec_runs[I]``."""
    return [(case, label) for case in spec.cases for label in case.dtypes]


def _setup(request: Dict[str, Any]):
    """``(resolver, trace, spec)`` for the side, or the message of why it cannot run at all."""
    side, backing = request["side"], request["backing"]
    resolver = Resolver.for_side(side, Path(request["tree"]), Path(request["other_tree"]), Path(request["spec"]))
    trace = OpTrace() if side == "migrated" else None
    try:
        with stage(f"cannot activate the emulation (backing {backing})"):
            activate(side, backing, trace)
    except CaseFailure as failure:
        return failure.message
    sys.path.insert(0, str(resolver.tree))  # the working directory is the run's scratch directory
    harness.TREE = resolver.tree  # where a harness `parity init` wrote imports the tree's files from
    return resolver, trace, load_spec(Path(request["spec"]))


def _fed(lines) -> Iterator[tuple]:
    """``(run, path of the original side's result)`` per line ``RUN PATH`` of the migrated side's input."""
    for line in lines:
        run, _, path = line.strip().partition(" ")
        if run:
            yield int(run), path


def main(argv: List[str]) -> int:
    """Run the request's runs (the original side) or the runs fed on stdin (the migrated side), saving
    each run's result as ``<tmp>/<side>.<run>.pt`` and saying so in the progress file."""
    request = json.loads(Path(argv[0]).read_text())
    side, tmp, progress = request["side"], Path(request["tmp"]), Path(request["progress"])
    setup = _setup(request)
    if isinstance(setup, str):
        (tmp / f"{side}.fatal").write_text(setup)
        return 3
    resolver, trace, spec = setup
    runs = spec_runs(spec)
    progress_line(progress, READY)
    todo = ((run, None) for run in request["runs"]) if side == "original" else _fed(sys.stdin)
    for run, path in todo:
        progress_line(progress, START, run)
        original = torch.load(path, weights_only=True) if path else None
        case, label = runs[run]
        torch.save(run_case(case, label, resolver, request["backing"], original, trace), tmp / f"{side}.{run}.pt")
        progress_line(progress, DONE, run)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
