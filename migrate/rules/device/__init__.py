"""Device plumbing (NPU2xx): `.cuda()`, device strings, `torch.cuda.*`, NCCL, the profiler, capability
queries, CUDA-only branches and hidden torch imports; ``_cuda_only`` is the family's shared reader of
CUDA-only code paths."""
