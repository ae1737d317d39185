"""NPU202: ``"cuda"``/``"cuda:N"`` device strings → ``"npu"``/``"npu:N"`` where code names a device;
every other whole ``"cuda"`` of a torch file is kept and reported (``unplaced``), and files that do
not use torch are left to ``_scope``.

## What it does
Rewrites whole-string device literals `"cuda"`, `"cuda:N"` and `f"cuda:{i}"` to `"npu"` forms where
code names a device: `device=`, `device_type=`, `map_location=` (also dict keys and values),
`device_id(s)=`, any other keyword argument or dict key whose name says "device" (configuration
objects: `device_map="cuda:0"`, `{"eval_device": "cuda"}`; names saying "accelerator" are NPU208's),
the first argument of `torch.device`, `torch.autocast`, `torch.amp.autocast`,
`torch.amp.GradScaler`, `torch.Generator`, `torch.Event`, the autocast state functions
(`torch.is_autocast_enabled("cuda")`, `torch.get_autocast_dtype("cuda")`, ...), `DeviceMesh`,
`.to()`, every positional device string of the `torch.cuda` functions `transfer_to_npu` wraps
(`get_device_properties("cuda:0")`, `set_per_process_memory_fraction(0.5, "cuda:0")`, ...), values
assigned to or compared with variables named like a device (`device`, `dev`, `x.device.type`),
parameter defaults, `add_argument("--device", default=...)`, and `"cuda" if ... else "cpu"`
ternaries (also `get_accelerator() or "cuda"`). Every other whole `"cuda"`/`"cuda:N"` string of a
torch file — a dict key, a value compared with a name that says nothing, an argument of an unknown
function — is kept and reported (not a docstring, not text passed to `print`/logging): the vendor's
static tool rewrites it, but it often names CUDA itself (a per-device kernel registry, a saved
RNG-state key).

## Why
`transfer_to_npu` replaces `cuda` by `npu` in the device arguments of torch functions at run time
(opmap/reference/torch_npu_facts.md §5); the vendor's static tool rewrites `"cuda"` strings wherever
they are, which is how configuration objects (`from_pretrained(device_map=...)`,
`pipeline(device=...)`) get the NPU. Comparisons must change together with the assignments, or
`device.type == "cuda"` would silently become False.

## Fix safety
Safe for the positions listed. Strings inside larger text (log messages, paths) are never changed
because the whole value must be a device string. A comparison that guards CUDA-only code (`if
x.device.type == "cuda": <Triton kernel>`, `if device_type != "cuda": use_fp8 = False`) is kept and
reported as NPU207; the strings of a Lightning accelerator are reported as NPU208.

Only files that use torch are rewritten: a file that imports torch (or a library built on it), or
imports from its own package, is; a file that imports another GPU array library (CuPy, Numba, JAX,
...) and not torch is left alone; any other file gets the site reported ("... not made: this file
imports neither torch nor its own package"), never rewritten.

## Known problems
A device string that travels through a variable with an unrelated name (`target = "cuda"`) or a
config file is not found.
"""

import re

import libcst as cst

from ...diagnostics import DiagnosticCode
from ._cuda_only import CudaOnlyGuards
from .._literals import LiteralRule
from .._table import dotted


class DeviceString(CudaOnlyGuards, LiteralRule):
    declarations = (
        DiagnosticCode("NPU202", "device-string",
                       'device string "cuda[:N]" → "npu[:N]"',
                       rewrites=True, example="device_string", doc=__doc__),
    )
    triggers = (b"cuda",)

    pattern = re.compile(r"cuda(:\d+)?")
    kin = re.compile(r"(cpu|cuda|mps|meta|npu|xpu|hpu)(:\d+)?")
    words = {"cuda": "npu"}
    keywords = frozenset({"device", "device_type", "map_location", "device_id", "device_ids"})
    first_arg_of = frozenset({
        "torch.device", "torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler", "torch.set_default_device",
        "torch.get_device_module", "torch.distributed.device_mesh.init_device_mesh", "torch.distributed.init_device_mesh",
        "torch.distributed.device_mesh.DeviceMesh", "torch.Generator", "torch.Event", "torch.Stream",
        "torch.is_autocast_enabled", "torch.set_autocast_enabled", "torch.get_autocast_dtype",
        "torch.set_autocast_dtype", "torch.amp.is_autocast_available", "torch.amp.autocast_mode.is_autocast_available",
    })
    # functions transfer_to_npu wraps whose every positional device string it maps (facts §5)
    every_arg_of = frozenset(f"torch.cuda.{name}" for name in (
        "get_device_properties", "get_device_name", "get_device_capability", "set_device",
        "synchronize", "mem_get_info", "memory_stats", "memory_summary", "memory_allocated", "max_memory_allocated",
        "reset_max_memory_allocated", "memory_reserved", "max_memory_reserved", "reset_max_memory_cached",
        "reset_peak_memory_stats", "default_stream", "can_device_access_peer", "current_stream", "utilization",
        "set_per_process_memory_fraction", "caching_allocator_alloc", "get_rng_state", "set_rng_state", "device",
        "random.get_rng_state", "random.set_rng_state"))
    keyword_hint = re.compile(r"device")
    unplaced = "pattern.device.unplaced_string"
    hint = re.compile(r"device|^dev$|_dev$")
    not_hint = re.compile(r"accelerator")

    def keep(self, site: cst.CSTNode) -> bool:
        return self.keeps_cuda(site)

    def visit_Call(self, node: cst.Call) -> None:
        super().visit_Call(node)
        if dotted(node.func) is not None and self.qualified_name(node.func) in self.every_arg_of:
            for arg in node.args:
                if arg.keyword is None and not arg.star:
                    self.fix(arg.value)

    def takes_first_arg(self, call: cst.Call) -> bool:
        """Also ``x.to("cuda")`` (and ``x.cuda("cuda:1")``) on any receiver that is not an imported module."""
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("to", "cuda", "npu"):
            return dotted(func.value) is None or self.qualified_name(func.value) is None
        return super().takes_first_arg(call)
