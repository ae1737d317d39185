"""RMSNorm (NPU320, NPU322): ``npu_rms_norm`` takes a float32 weight with a half x, as under
autocast, and returns the original's dtype; the inference-only kernels (``npu_gemma_rms_norm``,
``npu_add_rms_norm``) run only where nothing needs a gradient.
"""

from functools import lru_cache

import torch
import torch_npu

from .core import _FLOATS, _names, _no_grad_needed, _record


# -- RMSNorm ----------------------------------------------------------------------------------------

#: F.rms_norm's eps when none is given for float16/bfloat16/float32 x: the epsilon of its op math type,
#: float32 (not x's dtype).
FLOAT32_EPS = torch.finfo(torch.float32).eps
_NO_WEIGHT = object()


def rms_norm_fits(x, weight=_NO_WEIGHT, normalized_shape=None, min_dim=2, *, mixed_dtype=False, when=True,
                  site=None):
    """``npu_rms_norm(x, weight)`` normalises what the original normalises: x is a float tensor of 2 to
    8 dims; weight (left out when the code has none) covers exactly the normalised trailing dims (the
    last one, unless ``normalized_shape`` says more) and has x's dtype, or, with ``mixed_dtype=True``,
    is float32 for a float16/bfloat16 x (the kernel's mixed precision, as under autocast: the site
    must then use ``rms_norm`` below, which returns the original's dtype). ``site``: counted there."""
    return _record(site, _rms_norm_why(x, weight, normalized_shape, min_dim, mixed_dtype), when=when)


def _rms_norm_why(x, weight, normalized_shape, min_dim, mixed_dtype):
    if not torch.is_tensor(x) or x.dtype not in _FLOATS:
        return "x is not a float16/bfloat16/float32 tensor"
    if not min_dim <= x.dim() <= 8:
        return f"x has {x.dim()} dims, not {min_dim} to 8"
    if normalized_shape is not None:
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if not shape or tuple(x.shape[x.dim() - len(shape):]) != shape:
            return f"x {tuple(x.shape)} does not end in the normalised shape {shape}"
    else:
        shape = tuple(x.shape[-1:])
    if weight is _NO_WEIGHT:
        return None
    if not torch.is_tensor(weight) or tuple(weight.shape) != shape:
        return f"the weight is not a tensor of shape {shape}"
    mixed = mixed_dtype and x.dtype in (torch.float16, torch.bfloat16) and weight.dtype == torch.float32
    return None if weight.dtype == x.dtype or mixed else f"x, weight dtypes {_names(x, weight)}"


def rms_norm(x, weight, epsilon=1e-06, *, dtype=None):
    """``npu_rms_norm(x, weight, epsilon)[0]`` in the dtype the original code returns: ``dtype``, by
    default the promotion of x's and weight's (``weight * normed.to(x.dtype)``, as Llama's RMSNorm
    does: float32 for a bfloat16 x and a float32 weight). Pass ``dtype=x.dtype`` for norms that
    cast back to the input's dtype (``.type_as(x)``)."""
    out = torch_npu.npu_rms_norm(x, weight, epsilon=epsilon)[0]
    dtype = torch.promote_types(x.dtype, weight.dtype) if dtype is None else dtype
    return out if out.dtype == dtype else out.to(dtype)


def rms_norm_eps(eps):
    """The epsilon ``F.rms_norm(x, ..., eps)`` uses: eps, or for None the epsilon of its op math type,
    which is float32 for float16, bfloat16 and float32 x (torch 2.13: ``torch.finfo(x.dtype).eps`` in
    its documentation, but its kernels and decomposition compute in float32 and take float32's)."""
    return FLOAT32_EPS if eps is None else eps


class RMSNorm(torch.nn.RMSNorm):
    """``torch.nn.RMSNorm`` whose forward runs ``npu_rms_norm`` where that computes what
    ``F.rms_norm`` does (same parameters, state dict and result dtype; otherwise the original
    forward). Migrated code constructs it as ``RMSNorm.at(site=...)(...)`` and subclasses
    ``RMSNorm.base(site=...)`` in place of ``torch.nn.RMSNorm``, so that each forward is counted
    at the site that made it (a plain attribute, not in the state dict)."""

    site = None

    @classmethod
    def at(cls, site=None):
        """A constructor of this class whose modules count their forwards at ``site``."""
        def construct(*args, **kwargs):
            module = cls(*args, **kwargs)
            module.site = site
            return module
        return construct

    @classmethod
    def base(cls, site=None):
        """This class as a base whose subclasses count their forwards at ``site`` (one class per
        site; the subclass itself is what instances and pickles name)."""
        return _sited_rms_norm(cls, site)

    def forward(self, x):
        weight = _NO_WEIGHT if self.weight is None else self.weight
        if rms_norm_fits(x, weight, normalized_shape=self.normalized_shape, mixed_dtype=True, site=self.site):
            gamma = x.new_ones(self.normalized_shape) if self.weight is None else self.weight
            return rms_norm(x, gamma, rms_norm_eps(self.eps), dtype=x.dtype)
        return super().forward(x)


@lru_cache(maxsize=None)
def _sited_rms_norm(cls, site):
    return type(cls.__name__, (cls,), {"site": site, "__module__": cls.__module__, "__qualname__": cls.__qualname__})


def gemma_rms_norm_fits(x, weight, *, when=True, site=None):
    """``npu_gemma_rms_norm`` has no backward on a real NPU: inference only, else as above."""
    why = _rms_norm_why(x, weight, None, 1, False)
    if why is None and not _no_grad_needed(x, weight):
        why = "a gradient is needed (npu_gemma_rms_norm has no backward)"
    if why is None and not x.is_contiguous():
        why = "x is not contiguous"
    return _record(site, why, when=when)


def add_rms_norm_fits(x1, x2, norm, kind, weight, *, when=True, site=None):
    """``npu_add_rms_norm(x1, x2, weight, eps)`` computes what ``norm(x1 + x2)`` does, and the sum:
    ``norm`` is exactly a ``kind`` module (the class whose forward the rule read as an RMSNorm) and
    calling it runs that forward (no hooks, no forward of the instance's own); x1 and x2 are float
    tensors of one shape (no broadcasting), 1 to 8 dims; the weight covers the last dim and has the
    dtype of the sum; no gradient is needed (the kernel has no backward on a real NPU)."""
    return _record(site, _add_rms_norm_why(x1, x2, norm, kind, weight), when=when)


def _add_rms_norm_why(x1, x2, norm, kind, weight):
    if type(norm) is not kind:
        return f"the norm is a {type(norm).__name__}, not the {kind.__name__} that was read"
    if _hooked(norm):
        return "calling the norm runs hooks or a forward of the instance's own"
    if not (torch.is_tensor(x1) and torch.is_tensor(x2)) or x1.dtype not in _FLOATS or x2.dtype not in _FLOATS:
        return "x1 and x2 are not float16/bfloat16/float32 tensors"
    if x1.shape != x2.shape:
        return f"x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} differ in shape (a broadcasting add)"
    summed = x1 if x1.dtype == torch.promote_types(x1.dtype, x2.dtype) else x2
    why = _rms_norm_why(summed, weight, None, 1, False)
    if why is None and not _no_grad_needed(x1, x2, weight):
        why = "a gradient is needed (npu_add_rms_norm has no backward)"
    return why


#: A hook function with this attribute set only observes calls (``migrate parity``'s recorder): a
#: fast path that computes a module's result without calling it may leave it uncalled.
OBSERVER = "npu_glue_observer"


def _hooked(module):
    """Whether calling ``module`` runs more than its class's forward: a hook that is not an
    observer's (``OBSERVER``), torch's global module hooks included, or a forward of its own."""
    shared = torch.nn.modules.module
    hooks = (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks, module._backward_pre_hooks,
             shared._global_forward_hooks, shared._global_forward_pre_hooks, shared._global_backward_hooks,
             shared._global_backward_pre_hooks)
    return any(not getattr(hook, OBSERVER, False) for found in hooks for hook in found.values()) \
        or "forward" in module.__dict__


def add_rms_norm(x1, x2, weight, epsilon=1e-06):
    """``(norm(x1 + x2), x1 + x2)`` by one ``npu_add_rms_norm`` call, in the dtype of the sum (the
    inputs are brought to it first, as ``x1 + x2`` does)."""
    dtype = torch.promote_types(x1.dtype, x2.dtype)
    y, _, summed = torch_npu.npu_add_rms_norm(x1.to(dtype), x2.to(dtype), weight, epsilon=epsilon)
    return y, summed
