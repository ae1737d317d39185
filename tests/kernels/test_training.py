"""A tiny transformer block trained a few steps three ways — written for an NPU (under
``emulate``), written for CUDA (under ``emulate_cuda``) and written for a plain device — gives
the same losses and weights: the emulation changes where code runs, never what it computes.

``torch_npu.optim.NpuFusedAdamW`` (kernels/optim.py) stands in for ``torch.optim.AdamW``; it
computes the same update, so the comparison stays exact."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from npu_migrate import kernels

pytestmark = pytest.mark.slow

STEPS = 3
BACKINGS = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


class TinyBlock(torch.nn.Module):
    """Pre-norm causal self-attention + MLP; ``device`` is where forward builds its mask, the
    way model code often writes ``device="cuda"`` or ``device="npu"``."""

    def __init__(self, device: str, dim: int = 16, heads: int = 2):
        super().__init__()
        self.device, self.heads = device, heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        mask = torch.triu(torch.ones(s, s, dtype=torch.bool, device=self.device), diagonal=1)
        attn = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


def train_on_npu():
    """Migrated code, as it would run on an Ascend machine."""
    import torch_npu

    torch.manual_seed(0)
    torch.npu.manual_seed(0)
    model = TinyBlock("npu").npu()
    optimizer = torch_npu.optim.NpuFusedAdamW(model.parameters(), lr=1e-2)
    scaler = torch.npu.amp.GradScaler()
    inputs = torch.randn(2, 8, 16).npu()
    target = torch.randn(2, 8, 16, device="npu")
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        with torch.npu.amp.autocast():
            loss = F.mse_loss(model(inputs).float(), target)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        torch.npu.synchronize()
        losses.append(loss.item())
    return losses, {k: v.cpu() for k, v in model.state_dict().items()}


def train_on_cuda():
    """The original CUDA code."""
    torch.manual_seed(0)
    torch.cuda.manual_seed(0)
    model = TinyBlock("cuda").cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.cuda.amp.GradScaler()
    inputs = torch.randn(2, 8, 16).cuda()
    target = torch.randn(2, 8, 16, device="cuda")
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        with torch.cuda.amp.autocast():
            loss = F.mse_loss(model(inputs).float(), target)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        torch.cuda.synchronize()
        losses.append(loss.item())
    return losses, {k: v.cpu() for k, v in model.state_dict().items()}


def train_plain(device: str = "cpu"):
    """The same code written for a plain torch device (the reference)."""
    torch.manual_seed(0)
    model = TinyBlock(device).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler(device)
    inputs = torch.randn(2, 8, 16).to(device)
    target = torch.randn(2, 8, 16, device=device)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        with torch.autocast(device, dtype=torch.float16):
            loss = F.mse_loss(model(inputs).float(), target)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    return losses, {k: v.cpu() for k, v in model.state_dict().items()}


def assert_same_training(result, reference):
    """Bit-identical: the emulated run executes the very same kernels on the same device."""
    (losses, weights), (ref_losses, ref_weights) = result, reference
    assert losses == ref_losses
    assert losses[-1] < losses[0], "the loss goes down"
    assert weights.keys() == ref_weights.keys()
    for name in weights:
        torch.testing.assert_close(weights[name], ref_weights[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("backing", BACKINGS)
def test_npu_code_trains_like_plain_code(backing):
    with kernels.emulate(backing):
        result = train_on_npu()
    assert_same_training(result, train_plain(backing))


def test_cuda_code_trains_like_cpu_code_under_emulate_cuda():
    reference = train_plain("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.cuda.amp.* are deprecated aliases
        with kernels.emulate_cuda():
            result = train_on_cuda()
    assert_same_training(result, reference)
