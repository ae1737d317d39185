"""NPU209 beyond its fixtures: where torch's device defaults to CUDA, the unmigrated call silently
acts on CUDA on an NPU machine (a disabled GradScaler, CUDA's autocast state), and the migrated
one acts on the NPU."""

import warnings

import pytest
import torch

from npu_migrate import kernels
from tests import snippets
from tests.rules.emulated import load

SOURCE = '''\
import torch


def scaler_and_state():
    scaler = torch.amp.GradScaler(init_scale=1024.0)
    with torch.autocast("cuda", dtype=torch.float16):
        on = torch.is_autocast_enabled()
    return scaler.is_enabled(), scaler.get_scale(), on
'''


def test_without_cuda_the_original_scaler_is_off_and_the_migrated_one_scales_on_the_npu():
    migrated = snippets.migrated(SOURCE, select=["NPU202", "NPU209"])
    assert 'torch.amp.GradScaler("npu", init_scale=1024.0)' in migrated and 'torch.is_autocast_enabled("npu")' in migrated
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaler = torch.amp.GradScaler(init_scale=1024.0)  # an NPU machine has no CUDA: the scaler disables itself
    assert not scaler.is_enabled()
    with kernels.emulate() as active:
        if not active:
            pytest.skip("a real torch_npu is installed; the emulator stays off")
        assert load(migrated)["scaler_and_state"]() == (True, 1024.0, True)
