"""Device plumbing (NPU2xx): `.cuda()`, device strings, `torch.cuda.*`, NCCL, the profiler, capability
queries, CUDA-only branches and hidden torch imports; and the vendor's opt-in advice on device use
(NPU4xx), which reads the device strings. ``_cuda_only`` is the family's reader of CUDA-only code."""
