"""Gated MLP (NPU330): the gate and up projections run as the original runs them and their outputs
are concatenated for ``npu_swiglu`` / ``npu_geglu`` (a copy of the activations per call, no
[gate; up] weight kept).
"""

import math

import torch
import torch_npu

from .core import _FLOATS, _compiling, _names, _record


# -- SwiGLU -------------------------------------------------------------------------------------------
# The gate and up projections run as the original runs them (the modules called, or the products
# made, with the parameters they hold now) and their two outputs are concatenated for the kernel: a
# copy of the activations per call, never a [gate; up] weight kept between calls (see "Derived
# state" above: nothing tells when such a copy went stale, and rebuilding it per call costs more).


def is_silu(act):
    """Whether ``act`` is SiLU: ``F.silu``, ``torch.nn.SiLU`` or transformers' ``SiLUActivation``
    (``ACT2FN["silu"]``; a plain ``nn.Module`` whose forward is ``F.silu``)."""
    if act is torch.nn.functional.silu or type(act) is torch.nn.SiLU:
        return True
    cls = type(act)
    return cls.__name__ == "SiLUActivation" and cls.__module__.startswith("transformers.")


def _swiglu_input_why(x):
    """Why npu_swiglu does not take ``x`` (a contiguous, non-empty float tensor of 1-8 dims with an
    even last dim), or None."""
    if not torch.is_tensor(x) or x.dtype not in _FLOATS or not 1 <= x.dim() <= 8:
        return "the gate and up values are not a float tensor of 1 to 8 dims"
    if x.shape[-1] % 2 or x.numel() == 0 or not x.is_contiguous():
        return "the gate and up values are empty, of odd width or not contiguous"
    return None


def _gate_up(gate, up):
    """(``[gate | up]`` on the last dim, the input of npu_swiglu / npu_geglu, None), or (None, why)
    when the halves differ in shape or dtype or the result is not a kernel input."""
    if not (torch.is_tensor(gate) and torch.is_tensor(up)):
        return None, "the gate and up values are not tensors"
    if gate.shape != up.shape or gate.dtype != up.dtype:
        return None, f"gate {tuple(gate.shape)} {_names(gate)} and up {tuple(up.shape)} {_names(up)} differ"
    fused = torch.cat([gate, up], dim=-1)
    why = _swiglu_input_why(fused)
    return (fused, None) if why is None else (None, why)


_NOT_SILU = "the activation is not SiLU"


def swiglu(act, gate, up, *, site=None):
    """``act(gate) * up`` with separate gate and up activations: npu_swiglu on the two concatenated.
    ``site``: counted there (as every function below that takes one)."""
    fused, why = _gate_up(gate, up) if is_silu(act) else (None, _NOT_SILU)
    return torch_npu.npu_swiglu(fused, dim=-1) if _record(site, why) else act(gate) * up


def swiglu_halves(act, gate_up, *, second=False, site=None):
    """``gate, up = gate_up.chunk(2, dim=-1); act(gate) * up`` (gate is the first half). ``second``: the
    second half is the gate (``up, gate = ...``); npu_swiglu activates the first half only, so the
    halves are swapped into [gate | up] (a copy, as for two projections: ``swiglu``)."""
    if second:
        up, gate = gate_up.chunk(2, dim=-1)
        return swiglu(act, gate, up, site=site)
    if _record(site, _swiglu_input_why(gate_up) if is_silu(act) else _NOT_SILU):
        return torch_npu.npu_swiglu(gate_up, dim=-1)
    gate, up = gate_up.chunk(2, dim=-1)
    return act(gate) * up


def _gated(act, gate, up, x, up_first):
    """The original ``act(gate(x)) * up(x)`` (``up_first``: ``up(x) * act(gate(x))``, up called first)."""
    if up_first:
        up_out = up(x)
        return act(gate(x)) * up_out
    return act(gate(x)) * up(x)


def _projections(gate, up, x, up_first):
    """``(gate(x), up(x))`` called in the original's order: an activation that is a pure function (SiLU,
    GELU) may run after both, nothing else moves."""
    if up_first:
        up_out = up(x)
        return gate(x), up_out
    return gate(x), up(x)


def swiglu_linear(act, gate, up, x, *, up_first=False, site=None):
    """``act(gate(x)) * up(x)`` for two projection modules: both called as the original calls them
    (any module: its current weights, hooks, parametrizations and overridden forward all apply),
    then npu_swiglu on their outputs concatenated. ``up_first``: the original reads ``up(x) *
    act(gate(x))``, calling ``up`` first (the order matters to modules that draw random numbers).
    Elsewhere (not SiLU, outputs of other shapes or dtypes) the original runs."""
    if not is_silu(act):
        _record(site, _NOT_SILU)
        return _gated(act, gate, up, x, up_first)
    return swiglu(act, *_projections(gate, up, x, up_first), site=site)


#: transformers' GELU activation classes (``ACT2FN["gelu_new"]``, ...) and the approximation each computes
_GELU_CLASSES = {"GELUActivation": "none", "GELUTanh": "tanh", "PytorchGELUTanh": "tanh", "NewGELUActivation": "tanh",
                 "FastGELUActivation": "tanh", "AccurateGELUActivation": "tanh"}
#: npu_geglu's ``approximate``: 0 = erf GELU (F.gelu's "none"), 1 = tanh
_GELU_MODES = {"none": 0, "tanh": 1}
_geglu_first_flag = {}  # device -> the activate_left value that makes npu_geglu activate the FIRST half


def gelu_approximation(act):
    """"none" or "tanh" when ``act`` is a GELU (``F.gelu``, ``nn.GELU``, transformers' GELU classes), else None."""
    if act is torch.nn.functional.gelu:
        return "none"
    if type(act) is torch.nn.GELU:
        return act.approximate if act.approximate in _GELU_MODES else None
    cls = type(act)
    return _GELU_CLASSES.get(cls.__name__) if cls.__module__.startswith("transformers.") else None


def is_glu(act, *, when=True, site=None):
    """Whether ``act`` is an activation of a fused gated-MLP kernel: SiLU (npu_swiglu) or GELU (npu_geglu)."""
    glu = is_silu(act) or gelu_approximation(act) is not None
    return _record(site, None if glu else "the activation is neither SiLU nor GELU", when=when, final=False)


def _geglu_first(device):
    """The ``activate_left`` that makes npu_geglu activate the first half on ``device``: CANN versions
    document opposite meanings of the flag, so it is asked of the kernel once per device (one tiny call
    and one sync per process); None under torch.compile before it is known."""
    flag = _geglu_first_flag.get(device)
    if flag is None and not _compiling():
        with torch.no_grad():
            probe = torch.tensor([[1.0, 2.0]], device=device)
            out = float(torch_npu.npu_geglu(probe, dim=-1, approximate=0, activate_left=True)[0])
        first, second = 2 * 0.5 * (1 + math.erf(1 / math.sqrt(2))), 2 * 0.5 * (1 + math.erf(2 / math.sqrt(2)))
        flag = _geglu_first_flag[device] = abs(out - first) < abs(out - second)
    return flag


def _geglu(gate_up, approximate, site, second=False):
    """npu_geglu on [gate | up] with the gate activated (``second``: on [up | gate], the second half
    activated), or None when it does not apply."""
    mode = _GELU_MODES.get(approximate)
    why = "the activation is not a GELU npu_geglu computes" if mode is None else _swiglu_input_why(gate_up)
    flag = _geglu_first(gate_up.device) if why is None else None
    if why is None and flag is None:
        why = "npu_geglu's activate_left is not known yet under torch.compile"
    if not _record(site, why):
        return None
    return torch_npu.npu_geglu(gate_up, dim=-1, approximate=mode, activate_left=flag != second)[0]


def _gelu(act, approximate):
    return act if act is not None else lambda t: torch.nn.functional.gelu(t, approximate=approximate)


def geglu_halves(act, gate_up, approximate=None, *, second=False, site=None):
    """``gate, up = gate_up.chunk(2, dim=-1); act(gate) * up`` for a GELU ``act`` (``None``: ``F.gelu``
    with ``approximate``) on npu_geglu, the original elsewhere. ``second``: the second half is the gate
    (``up, gate = ...``), which npu_geglu's ``activate_left`` activates in place (no copy)."""
    fused = _geglu(gate_up, approximate or gelu_approximation(act), site, second)
    if fused is not None:
        return fused
    gate, up = gate_up.chunk(2, dim=-1)
    if second:
        gate, up = up, gate
    return _gelu(act, approximate)(gate) * up


_NOT_GELU = "the activation is not a GELU npu_geglu computes"


def geglu(act, gate, up, approximate=None, *, site=None):
    """``act(gate) * up`` for a GELU ``act`` (``None``: ``F.gelu`` with ``approximate``) and separate gate
    and up values: npu_geglu on the two concatenated (as ``swiglu``); the original elsewhere."""
    approximate = approximate or gelu_approximation(act)
    gelu = _gelu(act, approximate)
    gate_up, why = _gate_up(gate, up) if approximate in _GELU_MODES else (None, _NOT_GELU)
    if why is not None:
        _record(site, why)
    fused = _geglu(gate_up, approximate, site) if why is None else None
    return fused if fused is not None else gelu(gate) * up


def geglu_linear(act, gate, up, x, *, approximate=None, up_first=False, site=None):
    """``act(gate(x)) * up(x)`` for a GELU ``act`` (``None``: ``F.gelu`` with ``approximate``) and two
    projection modules called as the original calls them (as ``swiglu_linear``), then npu_geglu on
    their outputs concatenated (``geglu``); the original elsewhere."""
    approximate = approximate or gelu_approximation(act)
    if approximate not in _GELU_MODES:
        _record(site, _NOT_GELU)
        return _gated(_gelu(act, approximate), gate, up, x, up_first)
    return geglu(act, *_projections(gate, up, x, up_first), approximate, site=site)


def glu(act, gate, up, *, site=None):
    """``swiglu`` or ``geglu`` for an activation known only at run time (``ACT2FN[...]``)."""
    if gelu_approximation(act) is not None:
        return geglu(act, gate, up, site=site)
    return swiglu(act, gate, up, site=site)


def glu_halves(act, gate_up, *, second=False, site=None):
    """``swiglu_halves`` or ``geglu_halves`` for an activation known only at run time (``ACT2FN[...]``)."""
    if gelu_approximation(act) is not None:
        return geglu_halves(act, gate_up, second=second, site=site)
    return swiglu_halves(act, gate_up, second=second, site=site)


def glu_linear(act, gate, up, x, *, up_first=False, site=None):
    """``swiglu_linear`` or ``geglu_linear`` for an activation known only at run time (``ACT2FN[...]``)."""
    if gelu_approximation(act) is not None:
        return geglu_linear(act, gate, up, x, up_first=up_first, site=site)
    return swiglu_linear(act, gate, up, x, up_first=up_first, site=site)


def swiglu_stacked(act, x, gate_weight, up_weight, *, equation=None, up_first=False, site=None):
    """``act(p(x, gate_weight)) * p(x, up_weight)`` where ``p`` is ``torch.einsum(equation, ...)`` or,
    without an equation, ``torch.matmul`` (expert MLPs): ``swiglu_linear`` with the two products as
    the projections, made with the weights as they are now (training too: every op on the way is
    differentiable)."""
    product = (lambda a, w: torch.einsum(equation, a, w)) if equation else torch.matmul
    return swiglu_linear(act, lambda t: product(t, gate_weight), lambda t: product(t, up_weight), x, up_first=up_first,
                         site=site)
