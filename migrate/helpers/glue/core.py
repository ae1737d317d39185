"""Glue for code migrated to Ascend NPUs by npu-migrate (vendored: part of your diff, edit freely).

The fused ``torch_npu`` kernels are exact replacements only under conditions known at run time
(dtype, rank, head dim, mask values, an activation, no autograd for the inference-only kernels).
The functions here check those conditions and convert what the kernels take; every migrated call
site falls back to its original code when they do not hold.

Derived state: nothing computed from a tensor's values is kept from one call to the next. A
model's parameters and buffers change in ways no cheap key sees: ``AdamW(fused=True)`` (and
``foreach=True`` on accelerators), ``torch._foreach_*`` ops and every ``p.data.copy_()`` leave the
version counter where it was; FSDP-style swaps and ``set_`` can land on a freed tensor's address;
``load_state_dict``, ``fill_`` and ``nn.init`` change a buffer proven causal where it was built. So
value conditions are checked on every call that needs them, all of a call's in one device->host
sync, unless a rule proves them from code in the same call. Under ``torch.compile`` an unproven
value condition is never evaluated: the original code runs, so the graph has no data-dependent
branch. The trade-off, measured on the emulator, is in npu-migrate's ``docs/design.md`` ("Derived
state"): per call, a copy where a kernel needs one and one device->host sync where values must be
checked, against caches that are silently wrong after a fused optimizer step or a ``.data`` write.

What ran, per site: every guard gets its site, ``site="path:line:CODE"`` (the finding of
``migrate run`` that rewrote it), and counts per site the calls that took the fused path and, for
each call that fell back, the first precondition that failed (``site_counts()``; ``migrate parity``
reports them). Plain Python counters updated beside the computation: no device->host sync, and
skipped while ``torch.compile`` traces (compiled calls are not counted, the graph gets no Python
side effect). The environment variable ``NPU_GLUE_SITES`` switches it: ``count`` (the default),
``log`` (count, and log each site's first fallback with its reason on the ``npu_glue`` logger, one
line per site: what a user profiling on an NPU reads to see why a kernel did not run) or ``off``.

Your edits are kept. The first line records the npu-migrate version, the sections and a sha256 of
the text below it. A later ``migrate run`` replaces only an unedited copy (the hash matches): with a
newer version, or with the sections that newly migrated files call added. An edited copy is never
replaced: files that call only names it still defines are migrated beside it (NPU018 says it was
kept and differs from what that run would write), files that need a name it lacks stay unchanged
(NPU011 names the missing functions).
"""

import logging
import os
import sys

import torch

_FLOATS = (torch.float16, torch.bfloat16, torch.float32)

#: In a package, migrated files import this module as ``from .npu_glue import npu_glue``: a relative
#: import in the form Hugging Face transformers' remote-code loader finds (``save_pretrained``
#: copies the files a modeling file imports that way, so ``trust_remote_code`` models keep working).
npu_glue = sys.modules[__name__]


# -- value checks, on every call --------------------------------------------------------------------


def _compiling():
    return torch.compiler.is_compiling()


def _failed(tensors, conditions):
    """The first condition (reason -> a function giving a 0-d bool tensor over ``tensors``' values)
    that does not hold, or None when all do, read back with one device->host sync for all of them.
    Evaluated on every call, never remembered: no key says that a tensor's values are still those a
    verdict was made on (see "Derived state" above). Pass only the unproven conditions; under
    torch.compile, or on meta tensors, an unproven condition counts as not holding."""
    if not conditions:
        return None
    if _compiling():
        return "a value condition is not checked under torch.compile: " + next(iter(conditions))
    if any(t.is_meta for t in tensors):
        return "a value condition cannot be checked on meta tensors: " + next(iter(conditions))
    reasons = list(conditions)
    with torch.no_grad():
        first = -1  # the index of the first condition that fails, on the device until the one sync
        for index in reversed(range(len(reasons))):
            first = torch.where(conditions[reasons[index]](), first, index)
        first = int(first)
    return None if first < 0 else reasons[first]


def _names(*tensors):
    return ", ".join(str(t.dtype).removeprefix("torch.") for t in tensors)


def _no_grad_needed(*tensors):
    """Kernels without a backward on a real NPU may run only where nothing needs a gradient."""
    return not torch.is_grad_enabled() or not any(t.requires_grad for t in tensors if t is not None)


# -- what ran, per site ---------------------------------------------------------------------------

#: ``NPU_GLUE_SITES``: "count" (default), "log" (count and log each site's first fallback) or "off"
SITES = os.environ.get("NPU_GLUE_SITES", "count").strip().lower()
_log = logging.getLogger("npu_glue")
_calls = {}  # site -> [calls, calls that ran the fused kernel]
_fallbacks = {}  # site -> {first failed precondition: calls}


def _record(site, why, *, when=True, final=True):
    """Count one call of ``site``: fused when ``why`` is None and ``when`` holds (the site's own
    flags, written by the rule), else fallen back because of ``why`` (the first precondition that
    failed); returns whether the fused path runs. ``final=False``: a check before the one that
    decides (a pass counts nothing: the deciding check counts the call). Python counters only,
    skipped under torch.compile and when NPU_GLUE_SITES is "off"."""
    if why is None and not when:
        why = "a condition of the site's own code does not hold (the `when` of its guard)"
    if site is None or SITES == "off" or _compiling() or why is None and not final:
        return why is None
    counts = _calls.setdefault(site, [0, 0])
    counts[0] += 1
    if why is None:
        counts[1] += 1
        return True
    reasons = _fallbacks.setdefault(site, {})
    if not reasons and SITES == "log":
        _log.warning("npu_glue: %s: the original code runs: %s", site, why)
    reasons[why] = reasons.get(why, 0) + 1
    return False


def site_counts():
    """``{site: {"calls": m, "fused": n, "fallbacks": {reason: calls}}}`` since the last reset."""
    return {site: {"calls": calls, "fused": fused, "fallbacks": dict(_fallbacks.get(site, {}))}
            for site, (calls, fused) in _calls.items()}


def reset_site_counts():
    _calls.clear()
    _fallbacks.clear()
