"""npu-migrate: rewrite PyTorch model code for Huawei Ascend NPUs."""

__version__ = "0.1.0"
