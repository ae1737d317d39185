"""Hugging Face remote code keeps working after migration (issue 8 item 6): a tiny custom model
package (config + ``PreTrainedModel`` with an RMSNorm, ``register_for_auto_class``) is migrated with
``migrate run``; the migrated model is imported under ``kernels.emulate()``, saved with
``save_pretrained`` (which must copy the vendored ``npu_glue.py`` beside the modeling file, found by
transformers' relative-import scan), loaded back with ``AutoModel.from_pretrained(...,
trust_remote_code=True)`` and run; its output equals the original model's."""

import importlib
import subprocess
import sys

import pytest
import torch

from npu_migrate import kernels

pytestmark = pytest.mark.slow

transformers = pytest.importorskip("transformers")

CONFIG = '''\
from transformers import PretrainedConfig


class TinyRmsConfig(PretrainedConfig):
    model_type = "tiny-rms"

    def __init__(self, hidden_size=16, rms_norm_eps=1e-6, **kwargs):
        self.hidden_size = hidden_size
        self.rms_norm_eps = rms_norm_eps
        super().__init__(**kwargs)
'''

MODELING = '''\
import torch
from torch import nn
from transformers import PreTrainedModel

from .configuration_tiny_rms import TinyRmsConfig


class TinyRmsNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class TinyRmsModel(PreTrainedModel):
    config_class = TinyRmsConfig

    def __init__(self, config):
        super().__init__(config)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.norm = TinyRmsNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_init()

    def forward(self, inputs):
        if inputs.device.type != "cuda":
            inputs = inputs.cuda()
        return self.norm(self.proj(inputs))
'''


@pytest.fixture()
def modules_cache(tmp_path, monkeypatch):
    """transformers copies remote code into HF_MODULES_CACHE: keep it inside the test's tmp dir."""
    from transformers import dynamic_module_utils

    cache = tmp_path / "hf_modules"
    monkeypatch.setattr(dynamic_module_utils, "HF_MODULES_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def migrate_package(tmp_path):
    source = tmp_path / "repo"
    package = source / "tiny_rms"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "configuration_tiny_rms.py").write_text(CONFIG)
    (package / "modeling_tiny_rms.py").write_text(MODELING)
    out, reports = tmp_path / "repo-npu", tmp_path / "reports"
    command = [sys.executable, "-m", "npu_migrate.migrate", "run", str(source), "--out", str(out),
               "--report-dir", str(reports), "--jobs", "1"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode in (0, 4, 8, 12), finished.stderr  # bits: files changed / sites reported
    return source, out


def import_package(root, name="tiny_rms"):
    sys.path.insert(0, str(root))
    try:
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]
        config = importlib.import_module(f"{name}.configuration_tiny_rms")
        modeling = importlib.import_module(f"{name}.modeling_tiny_rms")
    finally:
        sys.path.remove(str(root))
    return config, modeling


def drop_package(name="tiny_rms"):
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def test_migrated_remote_code_round_trip(tmp_path, modules_cache):
    source, out = migrate_package(tmp_path)
    migrated_modeling = (out / "tiny_rms" / "modeling_tiny_rms.py").read_text()
    assert "from .npu_glue import npu_glue" in migrated_modeling and "npu_glue.rms_norm(" in migrated_modeling
    assert "inputs.npu()" in migrated_modeling
    assert (out / "tiny_rms" / "npu_glue.py").is_file()

    torch.manual_seed(0)
    inputs = torch.randn(2, 3, 16)
    with kernels.emulate_cuda():
        config_module, modeling = import_package(source)
        original = modeling.TinyRmsModel(config_module.TinyRmsConfig())
        state = original.state_dict()
        expected = original(inputs)
    drop_package()

    with kernels.emulate() as active:
        if not active:
            pytest.skip("a real torch_npu is installed")
        try:
            config_module, modeling = import_package(out)
            config_module.TinyRmsConfig.register_for_auto_class()
            modeling.TinyRmsModel.register_for_auto_class("AutoModel")
            model = modeling.TinyRmsModel(config_module.TinyRmsConfig())
            model.load_state_dict(state)
            saved = tmp_path / "saved"
            model.save_pretrained(saved)
            assert {"modeling_tiny_rms.py", "configuration_tiny_rms.py", "npu_glue.py"} <= {p.name for p in saved.iterdir()}
        finally:
            drop_package()

        loaded = transformers.AutoModel.from_pretrained(saved, trust_remote_code=True)
        assert type(loaded).__name__ == "TinyRmsModel" and type(loaded).__module__.startswith("transformers_modules")
        calls = []
        real = sys.modules["torch_npu"].npu_rms_norm
        loaded_glue = sys.modules[type(loaded).__module__.rpartition(".")[0] + ".npu_glue"]
        assert loaded_glue.__file__.startswith(str(modules_cache))
        sys.modules["torch_npu"].npu_rms_norm = lambda *a, **k: calls.append(1) or real(*a, **k)
        try:
            result = loaded(inputs)
        finally:
            sys.modules["torch_npu"].npu_rms_norm = real
    assert calls, "the loaded remote code did not run the fused npu_rms_norm"
    torch.testing.assert_close(result, expected)
