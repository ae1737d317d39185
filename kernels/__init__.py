"""The emulated NPU: pure-PyTorch implementations of the torch_npu API and an emulated device."""
