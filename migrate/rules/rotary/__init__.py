"""Rotary position embedding (NPU310/NPU311) → ``npu_rotary_mul``; the matcher is ``_match``."""
