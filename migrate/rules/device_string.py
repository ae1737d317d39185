"""NPU202: ``"cuda"``/``"cuda:N"`` device strings → ``"npu"``/``"npu:N"`` where code names a device.

``transfer_to_npu`` rewrites the ``device``, ``device_type``, ``map_location``, ``device_id`` and
``device_ids`` arguments of torch calls at run time, and every positional device string of the
functions it wraps (``torch.cuda.get_device_properties("cuda:0")``, ``torch.is_autocast_enabled("cuda")``);
statically we also follow the literal into the variables that carry it (``device = "cuda" if ...
else "cpu"``, ``if device.type == "cuda":``) and into keywords of configuration objects that name a
device (``device_map="cuda"``, ``eval_device="cuda:1"``: a keyword whose name says "device").

Left as they are: a comparison that guards CUDA-only code (``if x.device.type == "cuda": <Triton>``,
``if device_type != "cuda": use_fp8 = False``: NPU207 reports it), the strings of a Lightning
accelerator (``accelerator="cuda"``: NPU208 reports it; Lightning has no "npu" accelerator), and
files that do not use torch (``_scope``). Any other ``"cuda"`` of a torch file (a dict key, a value
compared with an unknown name) is kept and reported (``unplaced``): the vendor's static tool would
rewrite it, but such a string often names CUDA itself (a per-device registry, a checkpoint key).
"""

import re

import libcst as cst

from npu_migrate.migrate.diagnostics import DiagnosticCode
from npu_migrate.migrate.rules._cuda_only import CudaOnlyGuards
from npu_migrate.migrate.rules._literals import LiteralRule
from npu_migrate.migrate.rules._table import dotted


class DeviceString(CudaOnlyGuards, LiteralRule):
    declarations = (
        DiagnosticCode("NPU202", "device-string",
                       'device string "cuda[:N]" → "npu[:N]"',
                       rewrites=True, example="device_string"),
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
