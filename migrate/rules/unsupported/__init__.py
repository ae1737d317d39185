"""APIs with no NPU build or kernel (NPU1xx): unsupported libraries and calls, float64, compile modes,
fused optimizers without an NPU kernel, and the vendor's opt-in advice (NPU4xx)."""
