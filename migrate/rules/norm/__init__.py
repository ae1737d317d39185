"""RMSNorm (NPU320/NPU321) → ``npu_rms_norm`` / ``npu_gemma_rms_norm``; the matcher is ``_match``."""
