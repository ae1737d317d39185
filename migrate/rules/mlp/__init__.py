"""Gated MLPs (NPU330/NPU331) → ``npu_swiglu`` / ``npu_geglu``; the matcher is ``_match``, MoE experts
gated by their library default are read by ``_experts``."""
