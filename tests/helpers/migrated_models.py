"""Migrated models beside their originals, in this process, under the emulated NPU.

``migrated_models(workdir)`` runs ``migrate run`` on the demo repo (``fixtures/demo``), the nanoGPT
fixture (``fixtures/models/nanogpt``, its explicit attention over a causal buffer) and on the
installed ``transformers`` llama and mixtral model directories (copied into ``workdir``; the
installed package is never written), then, inside ``kernels.emulate()``, imports each migrated
module under a name of its own beside the original and yields one ``Pair`` per model: builders of
the original and the migrated model from one seed with the same weights, and the inputs. The
migrated Hugging Face modules are imported as ``transformers.models.<family>.npu_migrated<n>_<file>``
so that their relative imports reach the installed package; their ``from .npu_glue import npu_glue`` finds
the migrated tree's copy, set as the package's ``npu_glue`` attribute for the duration and named
``...npu_glue<n>`` (<n> counts the sessions: dynamo keeps aliases of the modules it traced by name,
so a later session must not reuse a name). Shared by ``tests/helpers/test_glue_models.py`` and
``benchmarks/npu_cost.py``.

torch.compile under the emulator needs ``torch._dynamo`` imported before the first
``kernels.emulate()`` of the process: dynamo snapshots torch's functions when it is imported, and
imported during an emulation it records the emulator's wrappers of ``torch.full`` and friends,
which the next emulation replaces ("Attempted to call function marked as skipped").

``NEXT_EMISSION`` lists what the fused rules should emit next (the glue offers it; the rules are
not switched yet); ``emission="next"`` applies it to the migrated files by text substitution, so
its effect can be measured and tested on the real models now.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import itertools
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator

import torch
from typer.testing import CliRunner

from npu_migrate import kernels
from npu_migrate.migrate.cli import app
from npu_migrate.migrate.helpers import HELPER
from npu_migrate.migrate.helpers.assemble import used_names
from npu_migrate.migrate.helpers.sections import top_level_names, unknown
from tests.helpers.support import KERNELS  # noqa: F401 - re-exported for benchmarks/npu_cost.py

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "fixtures" / "demo"
NANOGPT = ROOT / "fixtures" / "models" / "nanogpt"
SEED = 0
_sessions = itertools.count()  # module names of their own for each migrated_models() (they may nest)

# (rule, pattern, replacement): the emitted call each rule should switch to.
NEXT_EMISSION = [
    ("NPU330 swiglu: one matmul against the cached [gate; up] weight, no per-call torch.cat",
     r"npu_glue\.swiglu\((?P<act>[\w.]+), self\.(?P<g>\w+)\((?P<x>\w+)\), self\.(?P<u>\w+)\((?P=x)\)\)",
     r"npu_glue.swiglu_linear(\g<act>, self.\g<g>, self.\g<u>, \g<x>)"),
    ("NPU320 rms_norm: float16/bfloat16 x with a float32 weight fuses, result in the original's dtype",
     r"npu_glue\.rms_norm_fits\((?P<x>\w+), (?P<w>[\w.]+)\):(?P<sp>\s+)"
     r"return torch_npu\.npu_rms_norm\((?P=x), (?P=w), epsilon=(?P<eps>[\w.]+)\)\[0\]",
     r"npu_glue.rms_norm_fits(\g<x>, \g<w>, mixed_dtype=True):\g<sp>return npu_glue.rms_norm(\g<x>, \g<w>, \g<eps>)"),
]


@dataclass
class Pair:
    name: str
    original: Callable[..., torch.nn.Module]  # (**changes) -> model; changes: ModelArgs / config fields
    migrated: Callable[..., torch.nn.Module]
    inputs: Callable[[], dict]
    original_tree: Path  # the directories whose code the model runs (for attributing ops)
    migrated_tree: Path
    layers: int
    depth: str  # the change that sets the number of layers: build(**{depth: n})

    def build(self, **changes) -> tuple:
        """(original, migrated) in eval mode, from one seed, the migrated holding the original's weights."""
        torch.manual_seed(SEED)
        original = self.original(**changes).eval()
        torch.manual_seed(SEED)
        migrated = self.migrated(**changes).eval()
        migrated.load_state_dict(original.state_dict())
        return original, migrated


def migrate_tree(source: Path, out: Path, emission: str = "current") -> Path:
    """``migrate run source --out out`` (report beside it); with ``emission="next"`` NEXT_EMISSION applied.
    Every ``npu_glue.<name>`` the migrated files call must be a name of the helper beside them."""
    result = CliRunner().invoke(app, ["run", str(source), "--out", str(out), "--report-dir", str(out.with_name(out.name + "-report")), "--jobs", "1"])
    if result.exit_code != 0:
        raise RuntimeError(f"migrate run {source} exited {result.exit_code}:\n{result.output}")
    if emission == "next":
        for path in out.rglob("*.py"):
            text = path.read_text()
            for _, pattern, replacement in NEXT_EMISSION:
                text = re.sub(pattern, replacement, text)
            path.write_text(text)
    _check_helper_names(out)
    return out


def _check_helper_names(out: Path) -> None:
    """Raise when a migrated file calls an ``npu_glue`` name that no helper section defines (a rule
    bug) or that the helper written beside it lacks."""
    for path in sorted(out.rglob("*.py")):
        names = used_names(path.read_text(encoding="utf-8"))
        if not names or path.name == f"{HELPER}.py":
            continue
        helper = path.with_name(f"{HELPER}.py")
        lacking = unknown(names) | (names - top_level_names(ast.parse(helper.read_text(encoding="utf-8"))))
        if lacking:
            raise AssertionError(f"{path} calls {', '.join(sorted(lacking))} of the helper, which {helper} lacks")


def _load(name: str, path: Path, package: str, search: list | None = None):
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=search)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = package
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _demo(workdir: Path, emission: str, loaded: list, session: int) -> Pair:
    out = migrate_tree(DEMO, workdir / "demo", emission)
    packages = {}
    for side, tree in (("original", DEMO), ("migrated", out)):
        name = f"npu_migrate_test_{side}{session}_tinyllama"
        loaded.append(name)
        packages[side] = _load(name, tree / "tinyllama" / "__init__.py", name, [str(tree / "tinyllama")])
    make = lambda: {"tokens": torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(SEED))}  # noqa: E731
    return Pair("demo tinyllama", packages["original"].build_tiny, packages["migrated"].build_tiny, make,
                DEMO / "tinyllama", out / "tinyllama", layers=packages["original"].ModelArgs().n_layers, depth="n_layers")


def _nanogpt(workdir: Path, emission: str, loaded: list, session: int) -> Pair:
    """nanoGPT with ``flash=False``: the attention masks its scores with a slice of a causal buffer."""
    out = migrate_tree(NANOGPT, workdir / "nanogpt", emission)
    names = [f"npu_migrate_test_{side}{session}_nanogpt" for side in ("original", "glue", "migrated")]
    loaded += names
    original = _load(names[0], NANOGPT / "model.py", "")
    glue = _load(names[1], out / "npu_glue.py", "")
    before = sys.modules.get("npu_glue")
    sys.modules["npu_glue"] = glue  # the migrated file's `import npu_glue` binds this copy
    try:
        migrated = _load(names[2], out / "model.py", "")
    finally:
        if before is None:
            sys.modules.pop("npu_glue", None)
        else:
            sys.modules["npu_glue"] = before
    inputs = lambda: original.make_inputs(SEED)  # noqa: E731 - with targets: full logits and the loss
    return Pair("nanoGPT (explicit attention)", lambda **c: original.build_model(flash=False, dropout=0.0, **c),
                lambda **c: migrated.build_model(flash=False, dropout=0.0, **c), inputs, NANOGPT, out,
                layers=original.GPTConfig.n_layer, depth="n_layer")


def _hf_maker(build: Callable[[], torch.nn.Module], module, **fixed) -> Callable[..., torch.nn.Module]:
    """A builder of the factory's model class, taken from ``module``, with config fields changed."""

    def make(**changes):
        reference = build()  # the factory's config
        config, changes = reference.config, {**fixed, **changes}
        if changes:
            config = type(config).from_dict({**config.to_dict(), "attn_implementation": "eager", **changes})
        return getattr(module, type(reference).__name__)(config)

    return make


def _transformers(workdir: Path, emission: str, loaded: list, session: int, attach) -> Dict[str, Pair]:
    from fixtures.real_code import factory  # imports transformers

    installed = Path(importlib.util.find_spec("transformers").origin).parent
    source = workdir / "transformers-source"
    for family in ("llama", "mixtral"):
        shutil.copytree(installed / "models" / family, source / "models" / family,
                        ignore=shutil.ignore_patterns("__pycache__"))
    out = migrate_tree(source, workdir / "transformers", emission)
    modules = {}
    for family in ("llama", "mixtral"):
        package = f"transformers.models.{family}"
        glue, migrated = f"{package}.npu_glue{session}", f"{package}.npu_migrated{session}_modeling_{family}"
        loaded += [glue, migrated]
        glue_module = _load(glue, out / "models" / family / "npu_glue.py", package)
        attach(importlib.import_module(package), "npu_glue", glue_module)
        sys.modules[f"{package}.npu_glue"] = glue_module  # `from .npu_glue import npu_glue` imports the submodule
        loaded.append(f"{package}.npu_glue")
        modules[family] = (importlib.import_module(f"{package}.modeling_{family}"),
                           _load(migrated, out / "models" / family / f"modeling_{family}.py", package))
    inputs = lambda: factory.make_inputs(SEED, torch.float32)  # noqa: E731
    cases = {  # key: (family, factory builder, fixed config changes)
        "llama": ("llama", factory.build_llama, {}),
        "mixtral": ("mixtral", factory.build_mixtral, {}),
        # the experts as batched matmuls (not the eager loop, whose data-dependent indexing stops graph capture)
        "mixtral-batched": ("mixtral", factory.build_mixtral, {"experts_implementation": "batched_mm"}),
    }
    pairs = {}
    for key, (family, build, fixed) in cases.items():
        original, migrated = modules[family]
        pairs[key] = Pair(f"transformers {family}" + (", batched_mm experts" if fixed else ""),
                          _hf_maker(build, original, **fixed), _hf_maker(build, migrated, **fixed), inputs,
                          installed / "models" / family, out / "models" / family, layers=2, depth="num_hidden_layers")
    return pairs


@contextlib.contextmanager
def migrated_models(workdir: Path, emission: str = "current") -> Iterator[Dict[str, Pair]]:
    """``{"demo", "nanogpt", "llama", "mixtral", "mixtral-batched": Pair}``, valid inside the ``with`` block."""
    import torch._dynamo  # noqa: F401 - before the emulator patches torch (see below)

    loaded: list = []  # module names
    attached: list = []  # (package, attribute, the value it had): restored in reverse (sessions may nest)

    def attach(package, name, module):
        attached.append((package, name, vars(package).get(name, attached)))
        setattr(package, name, module)

    with kernels.emulate():
        try:
            session = next(_sessions)
            pairs = {"demo": _demo(workdir, emission, loaded, session),
                     "nanogpt": _nanogpt(workdir, emission, loaded, session),
                     **_transformers(workdir, emission, loaded, session, attach)}
            yield pairs
        finally:
            for name in [n for n in sys.modules if n in loaded or n.startswith(tuple(m + "." for m in loaded))]:
                sys.modules.pop(name)
            for package, name, before in reversed(attached):
                if before is attached:
                    vars(package).pop(name, None)
                else:
                    setattr(package, name, before)
