"""Which fused kernels run, per site, in the modes people train and serve in; and the error against
the original (issue 19).

Tiny transformers models (2 layers, eager attention) of each family (stablelm with partial rotary:
half of each head rotated, the rest passed through) are migrated by ``migrate run``
(the installed ``models/<family>`` directories copied into the scratch directory; the installed
package is never written) and run beside the original under the emulated NPU, in each mode:
float32, bfloat16, AMP bfloat16 and AMP float16 inference (float32 weights under ``torch.autocast``),
a padded batch (left padding in ``attention_mask``), training float32 and training AMP bfloat16 and
float16 (forward and backward; no loss scaling, the same on both sides), ``generate()`` with a KV cache, and packed sequences (position ids that restart, no
mask: transformers builds a block-diagonal mask). Tiny litgpt and torchtune Llama-style models (their
packages installed by ``benchmarks/corpus.py`` into /work/scratch/corpus, migrated whole) run the
modes their APIs have: litgpt takes no padding mask nor packed positions (those cells say n/a);
torchtune takes a bool mask (padded, packed) but its KV cache needs its own generation loop
(n/a). The original and migrated packages share a name, so each side is imported in turn. What ran comes from the helper's per-site record
(``npu_glue.site_counts()``): per kernel family of the model (A attention, R rotary, N RMSNorm,
S SwiGLU/GeGLU, M MoE router) whether every reached site of it ran fused in the mode. The error is
judged by ``migrate parity``'s criteria for the dtype (``migrate/parity/criteria.yaml``): logits,
and in training the loss and every parameter's gradient; generate compares the tokens.

    flock /tmp/heavy.lock python benchmarks/runtime_coverage.py [--families llama,gemma] [--out DIR]

Prints the table, then per family and mode the sites that fell back and why (the helper's first
failed precondition).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import shutil
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from npu_migrate import kernels  # noqa: E402
from npu_migrate.migrate.parity import sites as site_record  # noqa: E402
from npu_migrate.migrate.parity.criteria import default_criteria  # noqa: E402
from npu_migrate.migrate.parity.metrics import compare  # noqa: E402
from tests.helpers.migrated_models import _load, migrate_tree  # noqa: E402

SCRATCH = Path("/work/scratch/i19/runtime_coverage")
KINDS = {"NPU301": "A", "NPU302": "A", "NPU310": "R", "NPU320": "N", "NPU330": "S", "NPU340": "M"}
ORDER = "ARNSM"
MODES = ("float32", "bfloat16", "amp-bf16", "amp-fp16", "padded", "train-f32", "train-amp-bf16", "train-amp-fp16",
         "generate", "packed")
AMP = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}  # autocast dtype by the mode's suffix
SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, attention_dropout=0.0, tie_word_embeddings=False)
FAMILIES = {  # family -> (config class name, model class name, config changes)
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"head_dim": 16}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"pad_token_id": 0}),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", {"partial_rotary_factor": 0.5}),  # partial rotary
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", {"num_local_experts": 4, "num_experts_per_tok": 2}),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                  {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                   "shared_expert_intermediate_size": 64, "decoder_sparse_step": 1}),
}


# -- the migrated modules ----------------------------------------------------------------------
def migrate_families(families: List[str], out: Path) -> Path:
    import transformers

    installed = Path(transformers.__file__).parent
    source = out / "transformers-source"
    shutil.rmtree(source, ignore_errors=True)
    for family in families:
        shutil.copytree(installed / "models" / family, source / "models" / family,
                        ignore=shutil.ignore_patterns("__pycache__"))
    migrated = out / "transformers"
    shutil.rmtree(migrated, ignore_errors=True)
    shutil.rmtree(out / "transformers-report", ignore_errors=True)
    return migrate_tree(source, migrated)


def load_family(family: str, migrated: Path):
    """(original modeling module, migrated modeling module, migrated glue module)."""
    package = f"transformers.models.{family}"
    glue = _load(f"{package}.npu_glue", migrated / "models" / family / "npu_glue.py", package)
    setattr(importlib.import_module(package), "npu_glue", glue)
    original = importlib.import_module(f"{package}.modeling_{family}")
    mine = _load(f"{package}.npu_migrated_modeling_{family}", migrated / "models" / family / f"modeling_{family}.py",
                 package)
    return original, mine, glue


# -- the modes ------------------------------------------------------------------------------------
def tokens(batch=2, length=8, seed=0):
    return torch.randint(1, 128, (batch, length), generator=torch.Generator().manual_seed(seed))


def _autocast(mode: str):
    """``torch.autocast`` in the mode's dtype for the AMP modes (inference or training), else nothing."""
    dtype = AMP.get(mode.removeprefix("train-"))
    return torch.autocast("cpu", dtype=dtype) if dtype is not None else nullcontext()


def judged_as(mode: str) -> str:
    """The dtype whose parity tolerance a mode is judged by: the lowest precision it computes in."""
    return "float16" if "fp16" in mode else "bfloat16" if "bf16" in mode or mode == "bfloat16" else "float32"


def run_mode(model: torch.nn.Module, mode: str) -> Dict[str, torch.Tensor]:
    """The tensors a mode compares: logits; in training also the loss and the gradients; tokens for generate."""
    ids = tokens()
    if mode in ("float32", "bfloat16", "amp-bf16", "amp-fp16", "padded", "packed"):
        model.eval()
        kwargs = {"input_ids": ids}
        if mode == "padded":
            mask = torch.ones_like(ids)
            mask[1, :3] = 0  # left padding of the second row
            kwargs["attention_mask"] = mask
        if mode == "packed":  # two sequences of 4 in one row: position ids restart, no mask
            kwargs = {"input_ids": ids[:1], "position_ids": torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]])}
        with torch.no_grad(), _autocast(mode):
            return {"logits": model(**kwargs).logits}
    if mode.startswith("train"):
        model.train()
        model.zero_grad(set_to_none=True)
        with _autocast(mode):
            logits = model(input_ids=ids).logits
        loss = logits.float().square().mean()
        loss.backward()
        grads = {f"grad {n}": p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        return {"logits": logits.detach(), "loss": loss.detach(), **grads}
    model.eval()
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=4, do_sample=False, use_cache=True, pad_token_id=0)
    return {"tokens": out}


def judge(want: Dict[str, torch.Tensor], got: Dict[str, torch.Tensor], dtype: str) -> Tuple[bool, str]:
    """(within tolerance, worst figure) under parity's criteria for ``dtype``."""
    if "tokens" in want:
        same = torch.equal(want["tokens"], got["tokens"])
        return same, "tokens equal" if same else "tokens differ"
    criteria = default_criteria()[dtype]
    worst, failed = 0.0, []
    for name, tensor in want.items():
        m = compare(tensor.float(), got[name].float(), criteria.rel_err)
        worst = max(worst, m.max_abs_err)
        if criteria.judge(m):
            failed.append(name)
    return not failed, f"abs {worst:.1e}" + (f", FAIL {failed[0]}" + (f" +{len(failed) - 1}" if failed[1:] else "")
                                             if failed else "")


def build(module, family: str, dtype: torch.dtype):
    config_name, model_name, changes = FAMILIES[family]
    config = getattr(module, config_name, None) or getattr(importlib.import_module("transformers"), config_name)
    config = config(**{**SMALL, **changes})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return getattr(module, model_name)(config).to(dtype)


# -- litgpt and torchtune: the two sides imported in turn ----------------------------------------------
CORPUS = Path("/work/scratch/corpus")
PACKAGE_MODES = {"litgpt": ("float32", "bfloat16", "amp-bf16", "amp-fp16", "train-f32", "train-amp-bf16", "train-amp-fp16",
                            "generate"),
                 "torchtune": ("float32", "bfloat16", "amp-bf16", "amp-fp16", "padded", "train-f32", "train-amp-bf16",
                               "train-amp-fp16", "packed")}


def _stub_datasets():
    """torchtune imports ``datasets`` (and pyarrow through it) at import time for its data recipes; the
    models never call it: an empty stand-in module is enough to import torchtune.models."""
    import types

    for name in ("datasets", "datasets.distributed"):
        module = sys.modules.setdefault(name, types.ModuleType(name))
        module.load_dataset = module.split_dataset_by_node = module.Dataset = None


def _package_model(name: str, dtype: torch.dtype):
    torch.manual_seed(0)
    if name == "litgpt":
        from litgpt.config import Config
        from litgpt.model import GPT

        config = Config(n_layer=2, n_head=4, n_embd=64, block_size=64, vocab_size=128, padded_vocab_size=128,
                        rotary_percentage=1.0, parallel_residual=False, bias=False, norm_class_name="RMSNorm",
                        mlp_class_name="LLaMAMLP", intermediate_size=128, n_query_groups=2)
        return GPT(config).to(dtype)
    from torchtune.models.llama3 import llama3

    return llama3(vocab_size=128, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, max_seq_len=64,
                  intermediate_dim=128).to(dtype)


class _Logits:
    """A package model's output as transformers' (``.logits``)."""

    def __init__(self, logits):
        self.logits = logits


def package_mode(name: str, model, mode: str) -> Dict[str, torch.Tensor]:
    """``run_mode`` for litgpt / torchtune models, whose calls differ from transformers'."""
    ids = tokens()
    if mode == "generate":  # litgpt: greedy decoding through its KV cache
        model.eval()
        model.set_kv_cache(batch_size=ids.shape[0])
        with torch.no_grad():
            logits = model(ids, input_pos=torch.arange(ids.shape[1]))
            out = [ids]
            for step in range(4):
                nxt = logits[:, -1:].argmax(-1)
                out.append(nxt)
                logits = model(nxt, input_pos=torch.tensor([ids.shape[1] + step]))
        model.clear_kv_cache()
        return {"tokens": torch.cat(out, dim=1)}

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, input_ids, attention_mask=None, position_ids=None):
            if name == "litgpt":
                return _Logits(self.inner(input_ids))
            s = input_ids.shape[1]
            causal = torch.ones(s, s, dtype=torch.bool).tril()
            mask = None
            if attention_mask is not None:  # True = attend
                mask = causal[None] & attention_mask.bool()[:, None, :]
            if position_ids is not None:  # one block per sequence
                starts = (position_ids == 0).cumsum(-1)
                mask = causal[None] & (starts[:, :, None] == starts[:, None, :])
            return _Logits(self.inner(input_ids, mask=mask, input_pos=position_ids))

    return run_mode(Wrapped(), mode)


def _purge(name: str) -> None:
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def package_rows(name: str, out: Path, modes) -> dict:
    source = CORPUS / "packages" / name
    migrated = migrate_tree(source, out / f"{name}-npu" / name)
    _stub_datasets()
    wanted = [m for m in modes if m in PACKAGE_MODES[name]]
    results: Dict[str, dict] = {}
    paths = [str(CORPUS / "deps")]
    for side, root in (("original", CORPUS / "packages"), ("migrated", migrated.parent)):
        _purge(name)
        sys.path[:0] = [str(root), *paths]
        try:
            for mode in wanted:
                dtype = torch.bfloat16 if mode == "bfloat16" else torch.float32
                try:
                    model = _package_model(name, dtype)
                    if side == "migrated":
                        model.load_state_dict(results[mode]["state"])
                    site_record.reset_counts()
                    got = package_mode(name, model, mode)
                    counts = site_record.take_counts()
                except Exception as exc:
                    results.setdefault(mode, {})["error"] = f"{side}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                    continue
                if side == "original":
                    results[mode] = {"want": got, "state": model.state_dict()}
                elif "error" not in results[mode]:
                    judged = judged_as(mode)
                    ok, figure = judge(results[mode]["want"], got, judged)
                    results[mode].update(ok=ok, figure=figure, counts=counts)
        finally:
            del sys.path[:1 + len(paths)]
            _purge(name)
    rows = {}
    for mode in modes:
        row = results.get(mode)
        rows[mode] = {"na": True, "counts": {}} if row is None else (
            {"error": row["error"], "counts": {}} if "error" in row else row)
    return None, rows


# -- one family ----------------------------------------------------------------------------------------
def family_rows(family: str, migrated: Path, modes=MODES):
    original_module, migrated_module, glue = load_family(family, migrated)
    family_sites = [s for s in site_record.rewritten_sites(migrated) if f"models/{family}/" in s]
    rows = {}
    for mode in modes:
        dtype = torch.bfloat16 if mode == "bfloat16" else torch.float32
        judged = judged_as(mode)
        original = build(original_module, family, dtype)
        mine = build(migrated_module, family, dtype)
        mine.load_state_dict(original.state_dict())
        site_record.reset_counts()
        started = time.perf_counter()
        try:
            want = run_mode(original, mode)
            site_record.reset_counts()
            got = run_mode(mine, mode)
            counts = {s: c for s, c in site_record.take_counts().items() if f"models/{family}/" in s}
            ok, figure = judge(want, got, judged)
        except Exception as exc:  # a mode the model does not support is a row, not a crash
            rows[mode] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}", "counts": {}}
            continue
        rows[mode] = {"ok": ok, "figure": figure, "counts": counts, "seconds": time.perf_counter() - started}
    return family_sites, rows


def kinds_ran(counts: Dict[str, dict]) -> Tuple[str, str]:
    """(kinds whose reached sites all ran fused at least once per call, kinds reached)."""
    reached, ran = set(), set()
    partial = set()
    for site, c in counts.items():
        kind = KINDS.get(site.rsplit(":", 1)[1])
        if kind is None or not c["calls"]:
            continue
        reached.add(kind)
        if c["fused"] == c["calls"]:
            ran.add(kind)
        else:
            partial.add(kind)
    ran -= partial
    return "".join(k for k in ORDER if k in ran), "".join(k for k in ORDER if k in reached)


def cell(row: dict, expected: str) -> str:
    if row.get("na"):
        return "n/a"
    if "error" in row:
        return "ERROR"
    ran, _ = kinds_ran(row["counts"])
    missing = "".join(k for k in expected if k not in ran)
    what = "all " + expected if not missing else f"{ran or '-'} (not {missing})"
    return f"{what}; {'ok' if row['ok'] else 'FAIL'} {row['figure']}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join([*FAMILIES, *PACKAGE_MODES]))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--out", type=Path, default=SCRATCH)
    args = parser.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    modes = [m for m in args.modes.split(",") if m]
    import torch._dynamo  # noqa: F401 - before the emulator patches torch

    hf = [f for f in families if f in FAMILIES]
    migrated = migrate_families(hf, args.out) if hf else None
    results = {}
    with kernels.emulate():
        for family in families:
            if family in PACKAGE_MODES:
                results[family] = package_rows(family, args.out, modes)
            else:
                results[family] = family_rows(family, migrated, modes)
    print("kernels: A attention, R rotary, N RMSNorm, S SwiGLU/GeGLU, M MoE router; a kind counts as run in a mode "
          "when every call of every reached site of it took the fused path")
    print("| family | " + " | ".join(modes) + " |")
    print("|---" * (len(modes) + 1) + "|")
    complete = total = 0
    for family, (_, rows) in results.items():
        expected = "".join(k for k in ORDER if any(k in kinds_ran(r["counts"])[1] for r in rows.values()))
        cells = [cell(rows[m], expected) for m in modes]
        complete += sum(c.startswith("all ") and "; ok " in c for c in cells)
        total += sum(c != "n/a" for c in cells)
        print(f"| {family} ({expected}) | " + " | ".join(cells) + " |")
    print(f"\n{complete}/{total} family-modes run every fused kernel the family has, within tolerance")
    print("\nfallbacks (site: ran n/m; first failed precondition):")
    for family, (_, rows) in results.items():
        for mode in modes:
            row = rows[mode]
            if row.get("na"):
                continue
            if "error" in row:
                print(f"  {family} {mode}: ERROR {row['error']}")
            for site, c in sorted(row["counts"].items()):
                if c["fused"] < c["calls"]:
                    reasons = "; ".join(f"{why} (x{n})" for why, n in c["fallbacks"].items())
                    print(f"  {family} {mode}: {site.split('/')[-1]}: ran {c['fused']}/{c['calls']}: {reasons}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
