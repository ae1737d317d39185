"""Attention (NPU301-NPU303): SDPA calls and hand-written attention → ``npu_fusion_attention``; the
matcher (``_match``), the reasons a site cannot fuse (``_blockers``), ranks and layouts (``_rank``),
the definitions of masks and buffers (``_definitions``) and later uses of moved names."""
