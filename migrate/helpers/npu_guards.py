"""Run-time guards for code migrated to Ascend NPUs by npu-migrate (vendored: part of your diff,
edit freely).

The fused ``torch_npu`` norm, SwiGLU and MoE-gating kernels compute exactly what the original code
does only under conditions known at run time: equal dtypes, supported ranks, a SiLU activation, no
autograd for the inference-only kernels. Each migrated site checks these here and runs its original
code when they do not hold. Imports only torch and torch_npu.
"""

import torch
import torch_npu

_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
#: F.rms_norm's eps when none is given: the epsilon of its op math type, float32 (not x's dtype).
FLOAT32_EPS = torch.finfo(torch.float32).eps


def _no_grad_needed(*tensors):
    """Kernels without a backward on a real NPU may run only where nothing needs a gradient."""
    return not torch.is_grad_enabled() or not any(t.requires_grad for t in tensors if t is not None)


_NO_WEIGHT = object()


def rms_norm_fits(x, weight=_NO_WEIGHT, normalized_shape=None, min_dim=2):
    """``npu_rms_norm(x, weight)`` normalises what the original normalises and returns its dtype:
    x is a float tensor of 2 to 8 dims; weight (left out when the code has none) is a tensor of x's
    dtype covering exactly the normalised trailing dims (the last one, unless ``normalized_shape``
    says more)."""
    if not torch.is_tensor(x) or x.dtype not in _FLOATS or not min_dim <= x.dim() <= 8:
        return False
    if normalized_shape is not None:
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if not shape or tuple(x.shape[x.dim() - len(shape):]) != shape:
            return False
    else:
        shape = tuple(x.shape[-1:])
    if weight is _NO_WEIGHT:
        return True
    return torch.is_tensor(weight) and weight.dtype == x.dtype and tuple(weight.shape) == shape


def gemma_rms_norm_fits(x, weight):
    """``npu_gemma_rms_norm`` has no backward on a real NPU: inference only, else as above."""
    return rms_norm_fits(x, weight, min_dim=1) and _no_grad_needed(x, weight) and x.is_contiguous()


def is_silu(act):
    """Whether ``act`` is SiLU: ``F.silu``, ``torch.nn.SiLU`` or transformers' ``SiLUActivation``
    (``ACT2FN["silu"]``; a plain ``nn.Module`` whose forward is ``F.silu``)."""
    if act is torch.nn.functional.silu or type(act) is torch.nn.SiLU:
        return True
    cls = type(act)
    return cls.__name__ == "SiLUActivation" and cls.__module__.startswith("transformers.")


def _swiglu_input_fits(x):
    return torch.is_tensor(x) and x.dtype in _FLOATS and 1 <= x.dim() <= 8 and x.shape[-1] % 2 == 0


def swiglu(act, gate, up):
    """``act(gate) * up`` with separate gate and up projections."""
    if is_silu(act) and torch.is_tensor(gate) and torch.is_tensor(up) and gate.shape == up.shape and gate.dtype == up.dtype:
        fused = torch.cat([gate, up], dim=-1)
        if _swiglu_input_fits(fused):
            return torch_npu.npu_swiglu(fused, dim=-1)
    return act(gate) * up


def swiglu_halves(act, gate_up):
    """``gate, up = gate_up.chunk(2, dim=-1); act(gate) * up`` (gate is the first half)."""
    if is_silu(act) and _swiglu_input_fits(gate_up):
        return torch_npu.npu_swiglu(gate_up, dim=-1)
    gate, up = gate_up.chunk(2, dim=-1)
    return act(gate) * up


def moe_gating_fits(logits, k, dim=-1):
    """``npu_moe_gating_top_k_softmax(logits, None, k)`` computes ``topk(softmax(logits, dim), k)``:
    softmax over the last dim of a 2-D/3-D float tensor, 0 < k <= min(experts, 1024), and no
    gradient needed (the kernel has no backward on a real NPU: routers in training keep the
    original code)."""
    if not torch.is_tensor(logits) or logits.dtype not in _FLOATS or logits.dim() not in (2, 3):
        return False
    if dim not in (-1, logits.dim() - 1):
        return False
    if isinstance(k, bool) or not isinstance(k, int) or not 0 < k <= min(logits.shape[-1], 1024):
        return False
    return _no_grad_needed(logits)
