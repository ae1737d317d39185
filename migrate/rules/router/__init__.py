"""MoE routers (NPU340/NPU341) → torch_npu's gating kernels; the matcher is ``_match``, grouped
routers ``_groups``, the statements a router spans ``_region``."""
