"""What the migrated code costs on a real NPU beyond its kernels: host syncs, copies, graph capture.

Migrates the demo repo (``fixtures/demo``) and the installed ``transformers`` llama and mixtral
model files (tiny configs from ``fixtures/real_code/factory.py``), and prints per model, for the
original and the migrated model measured in this run:

- device->host syncs per forward (``aten::_local_scalar_dense``, ``is_nonzero``, ``item``,
  ``equal``) whose Python stack passes through the model's own tree but not through the
  emulator's kernels, for the first forward (cold caches) and the mean of the next ones; "added"
  is migrated minus original (negative where a fused kernel replaced the original's op), "in
  npu_glue" those dispatched by the vendored helper itself (mean over the forwards), also for the
  same model with three times the layers (syncs must not grow with depth);
- ``aten::cat`` and repeat (``repeat``, ``repeat_interleave``, copies of expanded tensors) ops per
  forward, same attribution, and weight_cat: concatenations of parameters (swiglu_linear's
  [gate; up] weight, built once per weight version);
- whether ``torch.compile(model, fullgraph=True, backend="aot_eager")`` traces, the largest
  difference of the compiled output from the eager original, and the torch_npu ops left in the
  traced graph (``torch.ops.npu.*``; emulated ops that are plain Python are inlined into aten ops).

Targets (issue 9): 0 added syncs per layer (<= 1 per distinct mask or table per forward), 0 added
activation copies, fullgraph compile clean. ``--emission next`` measures the calls the rules should
emit next (``tests/helpers/migrated_models.NEXT_EMISSION``); ``both`` measures both.

Run: ``python benchmarks/npu_cost.py [--emission current|next|both] [--forwards N]`` (about a minute).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.dispatch_counts import OpCounter  # noqa: E402
from tests.helpers.migrated_models import KERNELS, NEXT_EMISSION, Pair, migrated_models  # noqa: E402

KINDS = ("sync", "cat", "repeat", "weight_cat")


def _logits(output):
    if isinstance(output, tuple):  # nanoGPT: (logits, loss)
        return output[0]
    return output.logits if hasattr(output, "logits") else output


def per_forward(model, inputs: dict, tree: Path, forwards: int):
    """(counts of the first forward, mean counts of the next ``forwards - 1``, where the glue's syncs were)."""
    seen = []
    for _ in range(forwards):
        with OpCounter([tree], excluded=[KERNELS]) as counter, torch.no_grad():
            model(**inputs)
        seen.append(counter)
    warm = {k: sum(c.counts[k] for c in seen[1:]) / max(1, len(seen) - 1) for k in KINDS}
    glue = {k: sum(n for c in seen for (kind, where), n in c.where.items()
                   if kind == k and where.startswith("npu_glue.py")) / forwards for k in KINDS}
    return dict(seen[0].counts), warm, glue


def _npu_op(target) -> bool:
    """A ``torch.ops.npu`` op: dynamo's graphs call the packet (``_qualified_op_name``), aot's the overload."""
    name = getattr(target, "_qualified_op_name", None) or getattr(getattr(target, "_schema", None), "name", "")
    return str(name).startswith("npu::")


def compiled(model, inputs: dict, reference: torch.Tensor) -> str:
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        from torch._dynamo.backends.common import aot_autograd  # noqa: F401 (registers aot_eager)
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            out = _logits(torch.compile(model, fullgraph=True, backend=backend)(**inputs))
    except Exception as error:  # noqa: BLE001 - reported, not raised
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return f"FAILS ({type(error).__name__}: {first[:110]})"
    finally:
        torch._dynamo.reset()
    npu_ops = sum(1 for gm in graphs for node in gm.graph.nodes if node.op == "call_function" and _npu_op(node.target))
    diff = (out.float() - reference.float()).abs().max().item()
    return f"traces, max |compiled - eager original| {diff:.2e}, torch.ops.npu calls in graph: {npu_ops}"


def measure(pair: Pair, forwards: int) -> list:
    original, migrated = pair.build()
    inputs = pair.inputs()
    rows = {}  # first: the glue's caches are cold for a model just built
    for side, model, tree in (("original", original, pair.original_tree), ("migrated", migrated, pair.migrated_tree)):
        rows[side] = per_forward(model, inputs, tree, forwards)
    with torch.no_grad():
        reference = _logits(original(**inputs))
        eager_diff = (_logits(migrated(**inputs)).float() - reference.float()).abs().max().item()
    lines = [f"{pair.name} ({pair.layers} layers; eager max |migrated - original| {eager_diff:.2e})"]
    for side in ("original", "migrated"):
        cold, warm, _ = rows[side]
        lines.append(f"  {side:<9} per forward: " + ", ".join(
            f"{k} {cold.get(k, 0)} first / {warm[k]:.1f} next" for k in KINDS))
    (o_cold, o_warm, _), (m_cold, m_warm, glue) = rows["original"], rows["migrated"]
    added = {k: (m_cold.get(k, 0) - o_cold.get(k, 0), m_warm[k] - o_warm[k]) for k in KINDS}
    lines.append("  added     per forward: " + ", ".join(f"{k} {a} first / {b:.1f} next" for k, (a, b) in added.items()))
    _, deeper = pair.build(**{pair.depth: 3 * pair.layers})
    deep_glue = per_forward(deeper, inputs, pair.migrated_tree, forwards)[2]
    lines.append("  in npu_glue per forward: " + ", ".join(f"{k} {glue[k]:.1f}" for k in KINDS)
                 + f"; syncs at {3 * pair.layers} layers: {deep_glue['sync']:.1f} per forward")
    for side, model in (("original", original), ("migrated", migrated)):
        lines.append(f"  compile   {side:<9} fullgraph: {compiled(model, inputs, reference)}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emission", choices=("current", "next", "both"), default="both")
    parser.add_argument("--forwards", type=int, default=3, help="forwards measured per model (the first is cold)")
    args = parser.parse_args()
    emissions = ("current", "next") if args.emission == "both" else (args.emission,)
    print(f"torch {torch.__version__}; emulated NPU on CPU; float32, batch 2, seq 16, torch.no_grad()")
    for emission in emissions:
        print(f"\n== emission: {emission}" + ("" if emission == "current" else " (" + "; ".join(
            why for why, _, _ in NEXT_EMISSION) + ")"))
        with tempfile.TemporaryDirectory() as tmp, migrated_models(Path(tmp), emission) as pairs:
            for pair in pairs.values():
                print("\n".join(measure(pair, args.forwards)))


if __name__ == "__main__":
    main()
