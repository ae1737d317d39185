"""NPU102–NPU119 (but NPU114): APIs and libraries with no NPU build or no NPU kernel, reported with
the op table's fallback plan (``opmap/unsupported.yaml``, ``opmap/cuda_only.yaml``).

Table-driven: a name that resolves to an ``unsupported``/``fallback`` record with one of these codes
is reported where it is used; a third-party library once per file, at its first import, as is a
CUDA-only torch name of ``TORCH_IMPORT_CODES``; the body of a function whose decorator is reported
is one site. Each code's page is its part below.

# NPU102
## What it does
Reports `torch.backends.cudnn.*`, `torch.backends.cuda.*`, the TF32 flags
`torch.backends.cuda.matmul.allow_tf32` and `torch.backends.cudnn.allow_tf32`, and
`torch.set_float32_matmul_precision`.

## Why
`transfer_to_npu` does not patch these: they have no effect on an NPU. The NPU's reduced-precision
float32 mode is HF32, switched by `torch.npu.matmul.allow_hf32` and `torch.npu.conv.allow_hf32`.

## Fix safety
Reported only (plan `manual`). The TF32 → HF32 switch is not rewritten automatically: both shorten
the float32 mantissa, but their accuracy and defaults differ, so the change should be a decision.

## Known problems
Reading the flags (`if torch.backends.cudnn.enabled:`) is reported like setting them.

# NPU103
## What it does
Reports every `torch.cuda.nvtx.*` use (`range_push`, `range_pop`, `range`, `mark`).

## Why
NVTX is NVIDIA's profiler annotation API and is not patched by `transfer_to_npu`. torch_npu's public
API has `torch_npu.npu.mstx`, the MindStudio equivalent.

## Fix safety
Reported only (plan `replace-library`): mstx ranges are closed by the id their start returns, not by
a stack, so push/pop pairs cannot be rewritten one call at a time.

## Known problems
The mstx function names are taken from the torch_npu documentation, not from the reference data
shipped here; check them against your torch_npu version.

# NPU104
## What it does
Reports `torch.utils.cpp_extension.load`, `load_inline` and `CUDAExtension`.

## Why
These compile `.cu` sources with nvcc for NVIDIA GPUs; nothing of that runs on an NPU.

## Fix safety
Reported only (plan `custom-kernel`).

## Known problems
`CppExtension` (CPU-only C++) is not reported. Extensions built by a `setup.py` that the tool does
not see are only found where their Python wrappers import them.

# NPU105
## What it does
Reports the first `import triton` of a file, each `@triton.jit` kernel (once, at its decorator: the
`tl.*` calls in its body are not reported one by one) and other uses of `triton` names such as
`triton.cdiv` at launch sites.

## Why
Triton compiles to NVIDIA/AMD GPU code; `transfer_to_npu` even makes `has_triton()` return False.

## Fix safety
Reported only (plan `custom-kernel`).

## Known problems
Kernels reached through `torch.compile` (inductor-generated Triton) are not user code and not
reported.

# NPU106
## What it does
Reports the first `flash_attn` import of a file and each use of a flash-attn name; `flash_attn_func`
and `flash_attn_varlen_func` carry the exact argument mapping to `torch_npu.npu_fusion_attention`.

## Why
flash-attn is a CUDA-only library; the NPU's fused attention is `npu_fusion_attention`, with
different conventions (scale default 1.0, True = masked out, layouts, `keep_prob = 1 - dropout_p`, a
7-tuple result).

## Fix safety
Reported only (plan `replace-library`): the call needs the head count, the layout and the causal
convention, which the call site alone does not always show.

## Known problems
Code that imports flash_attn inside `try:` only to probe availability is reported as well.

# NPU107
## What it does
Reports the first `xformers` import of a file (xformers has no NPU build, so the module does not
import on an NPU machine) and each use of an xformers name, with a plan per name:
`memory_efficient_attention`, `LowerTriangularMask`, `BlockDiagonalMask`, `BlockDiagonalCausalMask`
have their own records in `opmap/unsupported.yaml`.

## Why
xFormers' kernels are CUDA-only. `memory_efficient_attention` (q/k/v `[B, M, H, K]`) maps to
`npu_fusion_attention` with layout BSND, and its attention biases map to sparse modes and layouts:
`LowerTriangularMask` is causal aligned top-left (query i sees keys 0..i), which is `sparse_mode=2`
(leftUpCausal), not 3 (rightDownCausal, bottom-right: differs whenever queries are fewer than keys);
the block-diagonal masks describe packed sequences and become layout TND with
`actual_seq_qlen`/`actual_seq_kvlen`, the cumulative sequence ends without the leading 0
(opmap/reference/torch_npu_facts.md §2.1, §v.2, §v.6).

## Fix safety
Reported only (plan `replace-library`).

## Known problems
Tensor biases other than 0/-inf masks need a `pse` tensor, whose scaling depends on the `pse_type`
of the torch_npu version (opmap/reference/torch_npu_facts.md §v.13); the plan says so but cannot
build it. Biases built in one place and passed through several functions are reported where the
xformers names are used, not where the attention runs.

# NPU108
## What it does
Reports the first `apex` / `amp_C` import of a file and each use of an apex name, with specific
plans for `FusedAdam`, `FusedLAMB`, `FusedSGD`, `FusedRMSNorm`, `FusedLayerNorm` and `apex.amp`.

## Why
Apex's fused kernels are CUDA-only (the official tool cannot migrate `FusedAdam` and requires
removing `import amp_C`); torch_npu has fused optimizers (`torch_npu.optim.NpuFusedAdamW`, ...),
`npu_rms_norm` and native autocast.

## Fix safety
Reported only (plan `replace-library`): the NPU fused optimizers accept only float32/float16
parameters, default `zero_grad(set_to_none=False)` and need `clip_grad_norm_fused_`, so swapping
them in is a decision.

## Known problems
Apex's `amp.initialize` opt levels O2/O3 (master weights, casting the model) have no one-line
equivalent.

# NPU109
## What it does
Reports the first `bitsandbytes` import of a file and each use of a bitsandbytes name.

## Why
bitsandbytes' 8-bit optimizers and 4/8-bit layers are CUDA kernels.

## Fix safety
Reported only (plan `replace-library`).

## Known problems
Quantised checkpoints (`load_in_8bit=True` in transformers) are configured by strings and flags, not
names, and are not detected.

# NPU110
## What it does
Reports `torch.nn.DataParallel` and `torch.nn.parallel.DataParallel`.

## Why
DataParallel is not supported on NPU (official limitation of `transfer_to_npu`);
DistributedDataParallel with the HCCL backend is.

## Fix safety
Reported only (plan `manual`): DDP needs one process per device and a launcher (torchrun), which
changes how the script is run.

## Known problems
A project's own class named `DataParallel` is not reported (names are resolved through imports).

# NPU111
## What it does
Reports `torch.jit.script` and `torch.jit.script_method`, as calls and as decorators.

## Why
torch_npu does not support TorchScript; `transfer_to_npu` replaces `torch.jit.script` with the
identity.

## Fix safety
Reported only (plan `manual`).

## Known problems
`torch.jit.trace` is not reported.

# NPU112
## What it does
Reports `torch.channels_last` and `torch.channels_last_3d`.

## Why
channels_last is listed among `transfer_to_npu`'s unsupported features; the NPU runtime chooses its
own internal layouts.

## Fix safety
Reported only (plan `manual`): values do not change, only the layout hint goes.

## Known problems
A `memory_format` held in a variable and set elsewhere is reported where the name is used.

# NPU113
## What it does
Reports the first `mamba_ssm` or `causal_conv1d` import of a file and each use of their names
(`selective_scan_fn`, `mamba_inner_fn`, `causal_conv1d_fn`, `Mamba`, ...), from the `mamba_ssm.*`
and `causal_conv1d.*` records of `opmap/cuda_only.yaml`.

## Why
Both packages are CUDA kernel libraries with no NPU build: a module that imports them does not
import on an NPU machine, whatever else is migrated.

## Fix safety
Reported only (plan `composite`): the selective scan written with torch ops is a sequential loop,
much slower than the kernel; check the replacement with `migrate parity`.

## Known problems
Projects that import these packages lazily (inside a `try:` or a function) are reported at that
import too, even when a pure-torch path already exists next to it.

# NPU115
## What it does
Reports each use of a float8 (or float4) dtype (`torch.float8_e4m3fn`, `float8_e5m2`, the `fnuz`
variants, `float8_e8m0fnu`, `float4_e2m1fn_x2`) and of `torch._scaled_mm` /
`torch._scaled_grouped_mm`.

## Why
torch_npu 2.14.0 registers NPU kernels for `aten::_scaled_mm` and `aten::_scaled_grouped_mm`
(`opmap/reference/aten_ops_with_npu_kernels.txt`), so the code is kept as it is; but the reference
data does not say which Ascend SoCs compute in float8, so a float8 path is a risk to check on the
target machine rather than a migration that can be proven here.

## Fix safety
Reported only (plan `manual`). Device gates of float8 paths (`if device.type != "cuda": use_fp8 =
False`) are kept CUDA-only by NPU207, so a migrated tree turns float8 on only where the user does
it.

## Known problems
Dtype comparisons (`x.dtype == torch.float8_e4m3fn`) are reported too, although they only test a
dtype.

# NPU116
## What it does
Reports the first `import helion` of a file and each Helion kernel once, at its
`@helion.kernel(...)` decorator (the `hl.*` calls in its body are not reported one by one), and
other uses of `helion` names.

## Why
Helion compiles its kernels to Triton, which has no NPU backend; the module does not import on an
NPU machine.

## Fix safety
Reported only (plan `custom-kernel`).

## Known problems
Kernels imported from another module are reported at their import and uses, not at their definition.

# NPU117
## What it does
Reports each use of a `torch.nn.attention.flex_attention` name (`flex_attention`,
`create_block_mask`, `BlockMask`, `and_masks`, ...).

## Why
FlexAttention's fused form is Triton code that `torch.compile` generates; there is no
`flex_attention` kernel among torch_npu's NPU kernels. Without compilation it materialises the whole
score matrix (slow, memory-bound). Most block masks have an `npu_fusion_attention` form
(opmap/reference/torch_npu_facts.md §2.1): causal → `sparse_mode=2` (top-left) with the compressed
2048×2048 `triu` mask; sliding window → `sparse_mode=4` (band, anchored bottom-right) with
`pre_tockens`/`next_tockens`; document masks → layout TND with `actual_seq_qlen`/`actual_seq_kvlen`;
additive `score_mod` biases → `pse`.

## Fix safety
Reported only (plan `replace-library`).

## Known problems
The rule does not read the `mask_mod`/`score_mod` functions, so the plan lists the mappings instead
of choosing one; non-additive score mods (tanh soft-capping) have no fused NPU form.

# NPU118
## What it does
Reports each call of `torch._grouped_mm`, `torch._weight_int4pack_mm`,
`torch._convert_weight_to_int4pack` and `torch._weight_int8pack_mm`.

## Why
None of these aten ops is among torch_npu 2.14.0's NPU kernels
(`opmap/reference/aten_ops_with_npu_kernels.txt`): on an NPU they fall back to the CPU (or fail with
`TORCH_NPU_FALLBACK_CPU_DISABLE=1`). torch_npu has fused equivalents: `npu_grouped_matmul` (weights
`[K, N]` per group, `group_list` of cumulative ends with `group_list_type=0`, one output with
`split_item=3`) and `npu_weight_quant_batchmatmul` with `npu_convert_weight_to_int4pack`
(W4A16/W8A16).

## Fix safety
Reported only. `npu_grouped_matmul` has no backward in this wheel
(opmap/reference/torch_npu_facts.md §8): for training the plan is a loop of `torch.mm` over the
groups.

## Known problems
The int4 packing layouts differ: weights packed for `_weight_int4pack_mm` must be re-packed from the
quantised values, which the tool cannot do.

# NPU119
## What it does
Reports the first `cupy` / `pycuda` import of a file and each use of a `cupy.*`, `numba.cuda.*` or
`pycuda.*` name (a `@cuda.jit` kernel once, at its decorator).

## Why
These libraries run on NVIDIA (CuPy also AMD) GPUs only: a module that imports them does not import
on an NPU machine. Such files are otherwise left untouched: the device rewrites (NPU202–NPU205) act
only in files that use torch, so a CuPy file's `"cuda"` strings and `.cuda` members are never turned
into NPU code.

## Fix safety
Reported only (plan `replace-library`). `numba.jit` / `numba.njit` (CPU) are not reported.

## Known problems
`from numba import cuda` alone is not reported; the uses of `cuda.*` are.
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
                       example="cudnn_tf32", doc=__doc__),
        DiagnosticCode("NPU103", "nvtx", "torch.cuda.nvtx markers (use torch_npu.npu.mstx)", example="nvtx",
                       doc=__doc__),
        DiagnosticCode("NPU104", "cuda-extension", "custom CUDA extension (port to Ascend C / TileLang-Ascend)",
                       example="cpp_extension", doc=__doc__),
        DiagnosticCode("NPU105", "triton-kernel", "Triton kernel (port to TileLang-Ascend / Ascend C, or compose)",
                       example="triton", doc=__doc__),
        DiagnosticCode("NPU106", "flash-attn", "flash_attn (use torch_npu.npu_fusion_attention)",
                       example="flash_attn", doc=__doc__),
        DiagnosticCode("NPU107", "xformers", "xformers (use torch_npu.npu_fusion_attention or SDPA)",
                       example="xformers", doc=__doc__),
        DiagnosticCode("NPU108", "apex", "apex (torch_npu.optim.NpuFused*, npu_rms_norm, native autocast)",
                       example="apex", doc=__doc__),
        DiagnosticCode("NPU109", "bitsandbytes", "bitsandbytes (no NPU build)", example="bitsandbytes", doc=__doc__),
        DiagnosticCode("NPU110", "data-parallel", "torch.nn.DataParallel (use DDP with hccl)",
                       example="data_parallel", doc=__doc__),
        DiagnosticCode("NPU111", "jit-script", "torch.jit.script (run eagerly or torch.compile)",
                       example="jit_script", doc=__doc__),
        DiagnosticCode("NPU112", "channels-last", "channels_last memory format (drop it)", example="channels_last",
                       doc=__doc__),
        DiagnosticCode("NPU113", "mamba-kernels",
                       "mamba_ssm / causal_conv1d CUDA kernels (compose from torch ops or port)", example="mamba_ssm",
                       doc=__doc__),
        DiagnosticCode("NPU115", "float8", "float8 dtypes and scaled matmuls (need an SoC with float8 support)",
                       example="float8", doc=__doc__),
        DiagnosticCode("NPU116", "helion-kernel", "Helion kernel (compiles to Triton; port or compose)",
                       example="helion", doc=__doc__),
        DiagnosticCode("NPU117", "flex-attention",
                       "FlexAttention (no fused NPU kernel; map the mask to npu_fusion_attention)",
                       example="flex_attention", doc=__doc__),
        DiagnosticCode("NPU118", "aten-matmul", "aten matmul without an NPU kernel (_grouped_mm, _weight_int4pack_mm)",
                       example="aten_matmul", doc=__doc__),
        DiagnosticCode("NPU119", "cuda-arrays", "CUDA-only array library (CuPy, Numba CUDA, PyCUDA)",
                       example="cuda_arrays", doc=__doc__),
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
