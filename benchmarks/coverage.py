"""Per concept: how many component sites of real code are fused, reported with a reason, or silent.
    python benchmarks/coverage.py [--only REPO ...] [--scratch DIR] [--jobs N] [--parity] [--reasons N]
                                  [--silent] [--workdir DIR]

The corpus is ``benchmarks/corpus.py``'s: the installed transformers models (every family) and the
registry packages of ``corpus.PACKAGES`` (LLM stacks and training frameworks, vision transformers,
CLIP, speech, diffusion, mixture-of-experts libraries, rotary and attention reference code),
installed ``--no-deps`` into ``--scratch`` and exercised where pip put them, each migrated by a
whole ``migrate run`` process. Per concept (attention, rotary, RMS norm, gated MLP, router) and
repository it prints:

- seen: every finding of the concept's codes; fused: rewritten; reported: left as they are, with
  the reason in the finding; "form unread": the reported sites that only the residual pass caught
  (a component the rules do not read in that spelling, the kernel could perhaps compute it);
- silent: components the independent detectors of ``corpus.silent`` see with no finding (a bug),
  softmax modules (``nn.Softmax`` set in ``__init__``, ``benchmarks/softmax_modules.py``) included;
  ``--silent`` lists them (path:line);
- fused / (fused + form unread): the share of the sites the rules could read that they fuse
  (the target is at least 90%; sites the kernels cannot express are reported with a reason, and
  the most frequent reasons are listed per concept).

The reports stay in ``--workdir`` (``reports/<repo>/report.json``), where
``benchmarks/reason_sample.py`` draws the findings whose reasons are checked by hand.

``--parity`` also runs ``benchmarks/real_code_report.py``'s parity cases (tiny transformers llama,
gpt2, bert, mixtral, t5 models in float32, bfloat16, AMP and from a checkpoint, and tiny litgpt
and torchtune models) and prints per concept the kernels that ran in passing and failing cases.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # noqa: E402

# the kernels whose run in a parity case proves a concept's rewrite there
KERNELS = {"attention": ("npu_fusion_attention", "npu_prompt_flash_attention", "npu_incre_flash_attention"),
           "rotary": ("npu_rotary_mul",), "rms_norm": ("npu_rms_norm", "npu_gemma_rms_norm", "npu_add_rms_norm"),
           "gated_mlp": ("npu_swiglu", "npu_geglu"),
           "router": ("npu_moe_gating_top_k_softmax", "npu_moe_gating_top_k_softmax_v2", "npu_moe_gating_top_k")}


def reason(message: str) -> str:
    """A reported finding's reason without its specifics (names and numbers), to count alike ones."""
    text = message.split(": ", 1)[-1] if "not fused" in message or "form seen" in message else message
    text = re.sub(r"`[^`]*`", "`…`", text)
    text = re.sub(r"\(form seen: [^)]*\)", "(form seen: …)", text)
    return re.sub(r"\d+", "N", text)[:110]


def coverage(runs: Dict[str, corpus.Run]) -> tuple:
    rows, reasons = [], defaultdict(Counter)
    totals: Dict[str, Counter] = defaultdict(Counter)
    sites = {}
    for name, run in runs.items():
        counts = corpus.family_counts(run.report)
        sites[name] = corpus.silent(run.source, run.report)
        silent = Counter(family for _, _, family in sites[name])
        for family, c in counts.items():
            c["silent"] = silent[family]
            rows.append([family, name, c["seen"], c["fused"], c["reported"], c["residual"], c["silent"], share(c)])
            totals[family].update(c)
        for f in run.report.get("findings", []):
            family = next((fam.name for fam in corpus.families() if f["code"] in fam.codes), None)
            if family and f["action"] == "reported" and f["code"].startswith("NPU3"):
                reasons[family][reason(f["message"])] += 1
    for family, c in totals.items():
        rows.append([family, "all", c["seen"], c["fused"], c["reported"], c["residual"], c["silent"], share(c)])
    rows.sort(key=lambda r: (list(KERNELS).index(r[0]) if r[0] in KERNELS else 99, r[1] == "all"))
    return rows, reasons, sites


def share(c: Counter) -> str:
    readable = c["fused"] + c["residual"]
    return f"{100 * c['fused'] / readable:.0f}%" if readable else "-"


def parity(workdir: Path) -> List[List[str]]:
    import real_code_report

    cases = real_code_report.report_transformers(workdir / "transformers")
    for name in real_code_report.THIRD_PARTY:
        cases += real_code_report.report_third_party(name, real_code_report.SCRATCH, workdir / name)
    rows = []
    for family, kernels in KERNELS.items():
        passed, failed = Counter(), Counter()
        for case in cases:
            ran = set(case["op_coverage"].get("fused_npu_ops", {})) & set(kernels)
            for kernel in ran:
                (passed if case["passed"] else failed)[f"{case['family']} {case['dtype']}"] += 1
        rows.append([family, len(passed), ", ".join(sorted(passed)) or "-", len(failed), ", ".join(sorted(failed)) or "-"])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help=f"repositories ({', '.join([*corpus.PACKAGES, 'transformers'])})")
    parser.add_argument("--scratch", type=Path, default=corpus.SCRATCH,
                        help=f"where the packages are installed (packages/), first when missing ({corpus.SCRATCH})")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes of each migrate run (2)")
    parser.add_argument("--parity", action="store_true", help="also run the parity cases of real_code_report.py")
    parser.add_argument("--reasons", type=int, default=6, help="most frequent reasons shown per concept")
    parser.add_argument("--silent", action="store_true", help="list every silent site (path:line)")
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="coverage-"))
    targets = {k: v for k, v in corpus.repos(args.scratch).items() if not args.only or k in args.only}
    print(f"corpus: {corpus.versions(args.scratch)}; work dir {workdir}\n")
    runs = {name: corpus.migrate(name, source, workdir, "--jobs", str(args.jobs), "--no-cache")
            for name, source in targets.items()}
    rows, reasons, sites = coverage(runs)
    print(corpus.table(rows, ["concept", "repo", "seen", "fused", "reported", "form unread", "silent",
                              "fused/(fused+unread)"]))
    for family, counted in reasons.items():
        print(f"\n{family}: most frequent reasons for a reported site")
        for text, n in counted.most_common(args.reasons):
            print(f"  {n:>4}  {text}")
    if args.silent:
        print("\nsilent sites")
        for name, found in sites.items():
            for path, line, family in found:
                print(f"  {family:<10} {name}/{path}:{line}")
    if args.parity:
        print()
        print(corpus.table(parity(workdir / "parity"), ["concept", "passing runs", "(family dtype)",
                                                       "failing runs", "(family dtype)"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
