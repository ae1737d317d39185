"""APIs with no NPU build or kernel (NPU1xx): unsupported libraries and calls, float64, compile modes and
fused optimizers without an NPU kernel."""
