"""NPU102–NPU119 (but NPU114): APIs and libraries with no NPU build or no NPU kernel, reported with
the op table's fallback plan (``opmap/unsupported.yaml``, ``opmap/cuda_only.yaml``).

Table-driven: any name that resolves to an ``unsupported``/``fallback`` record with one of these
codes is reported where it is used. A third-party library (flash_attn, apex, xformers,
bitsandbytes, triton, amp_C, mamba_ssm, helion, cupy, ...) is also reported once per file at its
first import: such a module does not even import on an NPU machine; so is the first import of a
CUDA-only torch name (``TORCH_IMPORT_CODES``: FlexAttention, float8 dtypes, ...). The body of a
function whose decorator is reported (``@triton.jit``, ``@torch.jit.script``) is one site: its
``tl.*`` calls are not reported one by one.
"""

from typing import Set

import libcst as cst
from libcst.helpers import get_full_name_for_node

from ...diagnostics import DiagnosticCode
from .._table import REEXPORTED, REPORTED, TableNameRule, covering_record, dotted, reroot

# torch's own CUDA-only names (Triton ops, float8, FlexAttention, matmuls without NPU kernels):
# their imports are reported too, as a library's are
TORCH_IMPORT_CODES = frozenset({"NPU104", "NPU105", "NPU115", "NPU117", "NPU118"})


class UnsupportedApi(TableNameRule):
    # NPU114 is rule compile_mode's
    declarations = (
        DiagnosticCode("NPU102", "cudnn-switch", "cuDNN/TF32 switch with no NPU effect (HF32 is the analogue)",
                       example="cudnn_tf32"),
        DiagnosticCode("NPU103", "nvtx", "torch.cuda.nvtx markers (use torch_npu.npu.mstx)", example="nvtx"),
        DiagnosticCode("NPU104", "cuda-extension", "custom CUDA extension (port to Ascend C / TileLang-Ascend)",
                       example="cpp_extension"),
        DiagnosticCode("NPU105", "triton-kernel", "Triton kernel (port to TileLang-Ascend / Ascend C, or compose)",
                       example="triton"),
        DiagnosticCode("NPU106", "flash-attn", "flash_attn (use torch_npu.npu_fusion_attention)",
                       example="flash_attn"),
        DiagnosticCode("NPU107", "xformers", "xformers (use torch_npu.npu_fusion_attention or SDPA)",
                       example="xformers"),
        DiagnosticCode("NPU108", "apex", "apex (torch_npu.optim.NpuFused*, npu_rms_norm, native autocast)",
                       example="apex"),
        DiagnosticCode("NPU109", "bitsandbytes", "bitsandbytes (no NPU build)", example="bitsandbytes"),
        DiagnosticCode("NPU110", "data-parallel", "torch.nn.DataParallel (use DDP with hccl)",
                       example="data_parallel"),
        DiagnosticCode("NPU111", "jit-script", "torch.jit.script (run eagerly or torch.compile)",
                       example="jit_script"),
        DiagnosticCode("NPU112", "channels-last", "channels_last memory format (drop it)", example="channels_last"),
        DiagnosticCode("NPU113", "mamba-kernels",
                       "mamba_ssm / causal_conv1d CUDA kernels (compose from torch ops or port)", example="mamba_ssm"),
        DiagnosticCode("NPU115", "float8", "float8 dtypes and scaled matmuls (need an SoC with float8 support)",
                       example="float8"),
        DiagnosticCode("NPU116", "helion-kernel", "Helion kernel (compiles to Triton; port or compose)",
                       example="helion"),
        DiagnosticCode("NPU117", "flex-attention",
                       "FlexAttention (no fused NPU kernel; map the mask to npu_fusion_attention)",
                       example="flex_attention"),
        DiagnosticCode("NPU118", "aten-matmul", "aten matmul without an NPU kernel (_grouped_mm, _weight_int4pack_mm)",
                       example="aten_matmul"),
        DiagnosticCode("NPU119", "cuda-arrays", "CUDA-only array library (CuPy, Numba CUDA, PyCUDA)",
                       example="cuda_arrays"),
    )
    triggers = (b"cudnn", b"tf32", b"matmul_precision", b"backends.cuda", b"nvtx", b"cpp_extension", b"triton",
                b"flash_attn", b"xformers", b"apex", b"amp_C", b"bitsandbytes", b"DataParallel", b"jit",
                b"channels_last", b"mamba_ssm", b"causal_conv1d", b"float8", b"float4", b"_scaled_", b"helion",
                b"flex_attention", b"_grouped_mm", b"pack_mm", b"int4pack", b"cupy", b"numba", b"pycuda", b"liger",
                b"torch.ops")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._libraries: Set[str] = set()  # libraries already reported at an import in this file
        self._quiet = 0  # > 0 inside a function whose decorator was reported

    def owns(self, record) -> bool:
        return record.code in self.codes and record.status in REPORTED

    def on_record(self, node, qualified, record, api) -> None:
        if not self._quiet:
            super().on_record(node, qualified, record, api)

    # -- imports ----------------------------------------------------------------------------------
    def _library_import(self, node: cst.CSTNode, module: str) -> None:
        library = module.split(".")[0]
        if library == "torch" or library in self._libraries:
            return
        record, _ = covering_record(self.ctx.table, module)
        if record is not None and self.owns(record):
            self._libraries.add(library)
            self.report_record(node, record, module, f"import of {library}: {record.summary}")

    def _torch_import(self, node: cst.CSTNode, qualified: str) -> bool:
        """An import of a CUDA-only torch name (``from torch.nn.attention.flex_attention import
        BlockMask``): reported once per record and file, like a library. True when reported."""
        record, _ = covering_record(self.ctx.table, qualified)
        if record is None or record.code not in TORCH_IMPORT_CODES or not self.owns(record) or record.api in self._libraries:
            return False
        self._libraries.add(record.api)
        self.report_record(node, record, qualified, f"import of {qualified}: {record.summary}")
        return True

    def on_import(self, node: cst.Import) -> None:
        for alias in node.names:
            name = get_full_name_for_node(alias.name)
            if name.split(".")[0] == "torch":
                if self._torch_import(node, name):
                    return
            else:
                self._library_import(node, name)

    def on_import_from(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None:
            return
        module = get_full_name_for_node(node.module)
        if module.split(".")[0] != "torch":
            self._library_import(node, module)
            if not isinstance(node.names, cst.ImportStar):  # a library re-exported by the project
                for alias in node.names:
                    if alias.name.value in REEXPORTED:
                        self._library_import(node, alias.name.value)
        elif not isinstance(node.names, cst.ImportStar):
            any(self._torch_import(node, f"{module}.{alias.name.value}") for alias in node.names)

    # -- decorated functions ----------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self._quiet:
            self._quiet += 1
            return
        for decorator in node.decorators:
            target = decorator.decorator
            target = target.func if isinstance(target, cst.Call) else target
            qualified = (self.qualified_name(target) or self._reexported(target)) if dotted(target) else None
            record = covering_record(self.ctx.table, qualified)[0] if qualified else None
            if record is None and qualified and reroot(qualified):
                qualified = reroot(qualified)
                record = covering_record(self.ctx.table, qualified)[0]
            if record is not None and self.owns(record):
                self.on_record(target, qualified, record, record.api)
                self._quiet = 1
                return

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self._quiet:
            self._quiet -= 1
