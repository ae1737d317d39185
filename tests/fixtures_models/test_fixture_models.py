"""The fixture model repos under fixtures/models and fixtures/demo build, run and are deterministic.

Each fixture is a directory of plain modules (``model.py`` + its own modeling file) that
expects to be on ``sys.path``; several share module names (``model``), so every import
here goes through ``_on_path``, which removes the directory and its modules afterwards.
"""
import ast
import contextlib
import importlib
import importlib.util
import itertools
import sys
from pathlib import Path

import pytest
import torch
import yaml

from npu_migrate.migrate.parity.spec import load_spec

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = ROOT / "fixtures" / "models"
DEMO_DIR = ROOT / "fixtures" / "demo"
MODEL_NAMES = ["llama_gqa", "nanogpt", "bert", "mixtral_moe", "gptj"]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

_counter = itertools.count()


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    # these tensors are tiny: extra intra-op threads only add contention on a shared CI box
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@contextlib.contextmanager
def _on_path(directory: Path):
    directory = directory.resolve()
    before = set(sys.modules)
    sys.path.insert(0, str(directory))
    try:
        yield
    finally:
        sys.path.remove(str(directory))
        for name in set(sys.modules) - before:
            file = getattr(sys.modules[name], "__file__", None)
            if file and Path(file).resolve().is_relative_to(directory):
                del sys.modules[name]


def _load_file(directory: Path, filename: str):
    """Import ``directory/filename`` under a unique name with ``directory`` on sys.path."""
    with _on_path(directory):
        spec = importlib.util.spec_from_file_location(f"_fixture_{next(_counter)}", directory / filename)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


_MODULES = {}


def fixture_module(name: str):
    if name not in _MODULES:
        _MODULES[name] = _load_file(MODELS_DIR / name, "model.py")
    return _MODULES[name]


def select(out, selector):
    """parity.yaml ``output``: an index, a dict key or an attribute; tensors pass through."""
    if selector is None:
        if isinstance(out, torch.Tensor):
            return out
        if isinstance(out, (tuple, list)):
            return out[0]
        if isinstance(out, dict):
            return out["logits"]
        return out.logits
    if isinstance(selector, int):
        return out[selector]
    if isinstance(out, dict):
        return out[selector]
    return getattr(out, selector)


def assert_close(actual, expected, atol=1e-5, rtol=1e-5):
    # torch.testing.assert_close costs seconds on first use (lazy imports); this is enough here.
    # The default 1e-5 suits float32 paths that compute the same thing in a different order.
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    err = (actual.float() - expected.float()).abs()
    bound = atol + rtol * expected.float().abs()
    assert (err <= bound).all(), f"max abs error {err.max().item():.3g}"


def build(name, dtype=torch.float32, seed=0, **kwargs):
    torch.manual_seed(seed)
    model = fixture_module(name).build_model(**kwargs)
    return model.to(dtype).eval()


def logits_of(name, model, inputs):
    return select(model(**inputs), {"nanogpt": 0}.get(name))


# --------------------------------------------------------------------------- fixture models


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_forward_runs(name, dtype):
    mod = fixture_module(name)
    model = build(name, DTYPES[dtype])
    inputs = mod.make_inputs(0, DTYPES[dtype])
    assert inputs and all(isinstance(v, torch.Tensor) for v in inputs.values())
    ids = next(iter(inputs.values()))
    assert ids.dtype == torch.int64 and ids.dim() == 2 and ids.shape[1] <= 32
    with torch.no_grad():
        logits = logits_of(name, model, inputs)
    assert logits.shape == (*ids.shape, 128)
    assert torch.isfinite(logits).all()
    assert logits.float().std() > 0


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_tiny_and_initialised(name):
    model = build(name)
    n_params = sum(p.numel() for p in model.parameters())
    assert 10_000 < n_params < 1_000_000
    assert any(callable(getattr(m, "_init_weights", None)) or hasattr(m, "reset_parameters")
               for m in model.modules())


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_deterministic_for_a_seed(name):
    mod = fixture_module(name)
    a, b = build(name, seed=0), build(name, seed=0)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb), ka
    assert not torch.equal(next(build(name, seed=1).parameters()), next(a.parameters()))

    x1, x2, x3 = mod.make_inputs(0, torch.float32), mod.make_inputs(0, torch.float32), mod.make_inputs(1, torch.float32)
    assert all(torch.equal(x1[k], x2[k]) for k in x1)
    assert not all(torch.equal(x1[k], x3[k]) for k in x1)
    with torch.no_grad():
        assert torch.equal(logits_of(name, a, x1), logits_of(name, b, x2))


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_bfloat16_tracks_float32(name):
    mod = fixture_module(name)
    inputs = mod.make_inputs(0, torch.float32)
    with torch.no_grad():
        ref = logits_of(name, build(name, torch.float32), inputs).float().flatten()
        low = logits_of(name, build(name, torch.bfloat16), inputs).float().flatten()
    assert torch.nn.functional.cosine_similarity(ref, low, dim=0) > 0.99


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_backward(name):
    mod = fixture_module(name)
    model = build(name).train()
    logits = logits_of(name, model, mod.make_inputs(0, torch.float32))
    logits.float().pow(2).mean().backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    missing = [n for n, g in grads.items() if g is None]
    if name == "mixtral_moe":  # an expert no token was routed to gets no gradient
        missing = [n for n in missing if ".experts." not in n]
    assert not missing
    assert all(torch.isfinite(g).all() for g in grads.values() if g is not None)


def test_nanogpt_flash_and_manual_attention_agree():
    mod = fixture_module("nanogpt")
    flash, manual = build("nanogpt"), build("nanogpt", flash=False)
    assert flash.transformer.h[0].attn.flash and not manual.transformer.h[0].attn.flash
    assert "transformer.h.0.attn.bias" in manual.state_dict()
    inputs = mod.make_inputs(0, torch.float32)
    with torch.no_grad():
        assert_close(flash(**inputs)[0], manual(**inputs)[0], rtol=1e-5, atol=1e-5)


def test_gptj_complex_rotary_matches_sincos_rotary():
    mod = fixture_module("gptj")
    sincos, complex_ = build("gptj"), build("gptj", rotary_impl="complex")
    complex_.load_state_dict(sincos.state_dict())
    inputs = mod.make_inputs(0, torch.float32)
    with torch.no_grad():
        assert_close(sincos(**inputs), complex_(**inputs), rtol=1e-5, atol=1e-5)
    # the complex table is a plain attribute: model.to(bfloat16) must leave it complex
    complex_.to(torch.bfloat16)
    assert complex_.freqs_cis.is_complex()
    with torch.no_grad():
        assert torch.isfinite(complex_(**inputs)).all()


def test_mixtral_padding_mask_path_matches_causal_path():
    mod = fixture_module("mixtral_moe")
    model = build("mixtral_moe")
    padded = mod.make_inputs(0, torch.float32)
    assert not padded["attention_mask"].all()
    with torch.no_grad():
        masked = model(**padded).logits
        causal = model(input_ids=padded["input_ids"]).logits
    # row 0 has no padding, and right padding never changes earlier positions
    assert_close(masked[0], causal[0], rtol=1e-5, atol=1e-5)
    keep = padded["attention_mask"][1].bool()
    assert_close(masked[1][keep], causal[1][keep], rtol=1e-5, atol=1e-5)


def test_llama_left_padding_is_invisible():
    mod = fixture_module("llama_gqa")
    model = build("llama_gqa")
    inputs = mod.make_inputs(0, torch.float32)
    n_pad = int((inputs["attention_mask"][1] == 0).sum())
    assert n_pad > 0
    with torch.no_grad():
        padded = model(**inputs).logits[1, n_pad:]
        alone = model(input_ids=inputs["input_ids"][1:, n_pad:]).logits[0]
    # rtol 1e-4: the padded row runs at other positions through longer (masked) float32 reductions
    assert_close(padded, alone, rtol=1e-4, atol=1e-5)


def test_bert_output_attentions_returns_probabilities():
    mod = fixture_module("bert")
    model = build("bert", output_attentions=True)
    inputs = mod.make_inputs(0, torch.float32)
    with torch.no_grad():
        out = model(**inputs)
    assert len(out["attentions"]) == 2
    probs = out["attentions"][0]
    assert probs.shape == (2, 4, 16, 16)
    assert_close(probs.sum(-1), torch.ones(2, 4, 16))
    pad = inputs["attention_mask"] == 0
    assert probs[pad[:, None, None, :].expand_as(probs)].abs().max() == 0  # padding gets no weight
    with torch.no_grad():
        assert_close(out["logits"], build("bert")(**inputs)["logits"])


# ------------------------------------------------------------------------------- demo repo


@pytest.fixture(scope="module")
def demo():
    with _on_path(DEMO_DIR):
        import tinyllama  # noqa: PLC0415
        import parity_factory  # noqa: PLC0415
    return tinyllama, parity_factory


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_demo_builds_and_runs(demo, dtype):
    tinyllama, factory = demo
    torch.manual_seed(0)
    model = factory.build_model().to(DTYPES[dtype])
    inputs = factory.make_inputs(0, DTYPES[dtype])
    logits = model(**inputs)
    assert logits.shape == (2, 16, 128) and torch.isfinite(logits).all()
    logits.float().pow(2).mean().backward()
    assert all(p.grad is not None for p in model.parameters())
    torch.manual_seed(0)
    again = tinyllama.build_tiny().to(DTYPES[dtype])
    with torch.no_grad():
        assert torch.equal(again(**inputs), logits.detach())
    assert len(tinyllama.CharDataset(None, 16)[0][0]) == 16


def test_demo_scripts_parse_and_use_cuda_plumbing():
    train = (DEMO_DIR / "train.py").read_text()
    evals = (DEMO_DIR / "eval.py").read_text()
    for source in (train, evals):
        ast.parse(source)
    for idiom in [
        "torch.cuda.is_available()", ".cuda(", 'torch.device("cuda", local_rank)', "torch.cuda.set_device(",
        'init_process_group(backend="nccl")', "torch.cuda.amp.autocast(", "torch.cuda.amp.GradScaler(",
        "torch.backends.cudnn.benchmark = True", "torch.backends.cuda.matmul.allow_tf32 = True",
        "torch.cuda.synchronize()", "torch.cuda.max_memory_allocated()", "torch.save(",
        'map_location="cuda:0"', ".double()", "torch.cuda.manual_seed_all(", "argparse",
    ]:
        assert idiom in train, idiom
    for name in ["README.md", "requirements.txt", "parity.yaml", "tinyllama/__init__.py"]:
        assert (DEMO_DIR / name).is_file()


# ----------------------------------------------------------------------------- parity specs

SPECS = sorted([MODELS_DIR / n / "parity.yaml" for n in MODEL_NAMES] + [DEMO_DIR / "parity.yaml"])


def _resolve(spec_dir: Path, ref: str):
    target, _, attr = ref.partition(":")
    assert attr, f"{ref!r} is not 'file.py:callable' or 'package.module:callable'"
    if target.endswith(".py"):
        assert (spec_dir / target).is_file(), ref
        module = _load_file(spec_dir, target)
    else:
        with _on_path(spec_dir):
            module = importlib.import_module(target)
    fn = getattr(module, attr)
    assert callable(fn), ref
    return fn


def _declared_inputs(decl: dict, seed: int):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for key, d in decl.items():
        dtype = getattr(torch, d["dtype"])
        if dtype.is_floating_point:
            out[key] = torch.randn(d["shape"], generator=g, dtype=dtype)
        else:
            out[key] = torch.randint(d.get("low", 0), d["high"], d["shape"], generator=g, dtype=dtype)
    return out


def test_case_names_are_unique():
    names = [c["name"] for spec in SPECS for c in yaml.safe_load(spec.read_text())["cases"]]
    assert len(names) == len(set(names)), names


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.parent.name)
def test_parity_spec_loads_and_its_callables_run(spec):
    assert load_spec(spec).cases  # parity's own checker: a SpecError names each problem's line
    data = yaml.safe_load(spec.read_text())
    for case in data["cases"]:
        assert set(case.get("dtypes", ["float32"])) <= set(DTYPES)

        factory = _resolve(spec.parent, case["factory"])
        torch.manual_seed(0)
        model = factory(**case.get("kwargs", {})).eval()
        if isinstance(case["inputs"], str):
            inputs = _resolve(spec.parent, case["inputs"])(0, torch.float32)
        else:
            inputs = _declared_inputs(case["inputs"], 0)
        with torch.no_grad():
            out = model(**inputs)
        if "output" in case:
            out = select(out, case["output"])
        assert isinstance(out, torch.Tensor), case["name"]
        assert torch.isfinite(out).all(), case["name"]
