"""Sample arguments for every emulated op, shared by the dispatcher tests and the view tests.

``SAMPLES[name]()`` returns fresh ``(args, kwargs)``: small inputs that the op accepts, with
grad-requiring float tensors for the ops that have a backward. Some samples call other ops through
``torch.ops.npu``, so they need the ops registered (``kernels.emulate()``).
"""

from __future__ import annotations

import torch

from tests.kernels.attention_ref import compressed


def r(*shape, dtype=torch.float32, grad=False, seed=0):
    t = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
    return t.requires_grad_(grad)


def fa_grad_sample():
    q, k, v = r(2, 4, 8, 16, seed=1), r(2, 2, 8, 16, seed=2), r(2, 2, 8, 16, seed=3)
    out, smax, ssum, *_ = torch.ops.npu.npu_fusion_attention(q, k, v, 4, "BNSD", scale=0.25)
    return (q, k, v, r(2, 4, 8, 16, seed=4), 4, "BNSD"), dict(softmax_max=smax, softmax_sum=ssum, attention_in=out,
                                                             scale_value=0.25)


def _routing_sample():
    _, expert_idx, row_idx = torch.ops.npu.npu_moe_gating_top_k_softmax(r(6, 8), None, 2)
    return (r(6, 16), row_idx, expert_idx, 6), {}


# name -> () -> (args, kwargs); ops with a backward get grad-requiring inputs
SAMPLES = {
    "npu_fusion_attention": lambda: ((r(2, 4, 8, 16, grad=True), r(2, 2, 8, 16, grad=True, seed=1),
                                      r(2, 2, 8, 16, grad=True, seed=2), 4, "BNSD"),
                                     dict(atten_mask=compressed(), sparse_mode=2, scale=0.25)),
    "npu_fusion_attention_grad": fa_grad_sample,
    "npu_prompt_flash_attention": lambda: ((r(1, 4, 8, 16, dtype=torch.float16), r(1, 2, 8, 16, dtype=torch.float16),
                                            r(1, 2, 8, 16, dtype=torch.float16)),
                                           dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD",
                                                scale_value=0.25, atten_mask=r(1, 1, 8, 8, seed=4) > 0.8,
                                                pse_shift=r(1, 4, 8, 8, dtype=torch.float16, seed=3))),
    "npu_incre_flash_attention": lambda: ((r(2, 1, 64, dtype=torch.float16), r(2, 8, 64, dtype=torch.float16),
                                           r(2, 8, 64, dtype=torch.float16)), dict(num_heads=4, scale_value=0.25)),
    "npu_fused_infer_attention_score": lambda: ((r(1, 4, 8, 16, dtype=torch.bfloat16),
                                                 r(1, 4, 8, 16, dtype=torch.bfloat16, seed=1),
                                                 r(1, 4, 8, 16, dtype=torch.bfloat16, seed=2)),
                                                dict(num_heads=4, input_layout="BNSD", softmax_lse_flag=True,
                                                     atten_mask=r(1, 1, 8, 8, seed=4) > 0.8,
                                                     pse_shift=r(1, 4, 8, 8, dtype=torch.bfloat16, seed=3))),
    "npu_rms_norm": lambda: ((r(2, 3, 16, grad=True), r(16, grad=True)), {}),
    "npu_rms_norm_backward": lambda: ((r(2, 3, 16), r(2, 3, 16, seed=1), r(16, seed=2), r(2, 3, 1).abs()), {}),
    "npu_add_rms_norm": lambda: ((r(2, 16), r(2, 16, seed=1), r(16, seed=2)), {}),
    "npu_gemma_rms_norm": lambda: ((r(2, 16), r(16, seed=1)), {}),
    "npu_rotary_mul": lambda: ((r(2, 3, 4, 16, grad=True), r(1, 1, 4, 16, grad=True, seed=1),
                                r(1, 1, 4, 16, grad=True, seed=2)), {}),
    "npu_rotary_mul_backward": lambda: ((r(2, 3, 4, 16), r(2, 3, 4, 16, seed=1), r(1, 1, 4, 16, seed=2),
                                         r(1, 1, 4, 16, seed=3), "interleave"), {}),
    "npu_apply_rotary_pos_emb": lambda: ((r(2, 4, 3, 64), r(2, 4, 1, 64, seed=1), r(2, 4, 1, 64, seed=2),
                                          r(2, 4, 1, 64, seed=3)), {}),
    "npu_swiglu": lambda: ((r(3, 8, grad=True),), {}),
    "npu_swiglu_backward": lambda: ((r(3, 4), r(3, 8, seed=1)), {}),
    "npu_geglu": lambda: ((r(3, 8, grad=True),), dict(approximate=0)),
    "npu_geglu_grad": lambda: ((r(3, 4), r(3, 8, seed=1), r(3, 4, seed=2)), {}),
    "npu_gelu": lambda: ((r(3, 8, grad=True),), dict(approximate="tanh")),
    "npu_gelu_backward": lambda: ((r(3, 8), r(3, 8, seed=1)), {}),
    "npu_fast_gelu": lambda: ((r(3, 8, grad=True),), {}),
    "fast_gelu": lambda: ((r(3, 8, grad=True),), {}),
    "npu_fast_gelu_backward": lambda: ((r(3, 8), r(3, 8, seed=1)), {}),
    "npu_layer_norm_eval": lambda: ((r(2, 16), [16], r(16, seed=1), r(16, seed=2)), {}),
    "npu_add_layer_norm": lambda: ((r(2, 16, grad=True), r(2, 16, grad=True, seed=1), r(16, grad=True, seed=2),
                                    r(16, grad=True, seed=3)), dict(additional_output=True)),
    "npu_add_layer_norm_backward": lambda: ((r(2, 16), r(2, 16, seed=1), r(2, 16, seed=2), r(2, 1).abs(),
                                             r(2, 1, seed=3), r(16, seed=4), r(2, 16, seed=5)), {}),
    "npu_scaled_masked_softmax": lambda: ((r(1, 2, 32, 32, grad=True), torch.rand(1, 1, 32, 32) < 0.2), dict(scale=0.5)),
    "npu_scaled_masked_softmax_backward": lambda: ((r(1, 2, 32, 32), torch.rand(1, 2, 32, 32).softmax(-1),
                                                    torch.rand(1, 1, 32, 32) < 0.2, 0.5, False), {}),
    "npu_moe_gating_top_k_softmax": lambda: ((r(6, 8), torch.tensor([0, 1, 0, 0, 1, 0], dtype=torch.bool), 3), {}),
    "npu_moe_gating_top_k_softmax_v2": lambda: ((r(2, 3, 8),), dict(k=2, output_softmax=True)),
    "npu_moe_gating_top_k": lambda: ((r(6, 16, grad=True), 4),
                                     dict(bias=r(16, seed=1), k_group=2, group_count=4, norm_type=1, out_flag=True)),
    "npu_moe_gating_top_k_backward": lambda: ((torch.rand(6, 16), r(6, 4), torch.randperm(16)[:4].int().expand(6, 4)),
                                              dict(norm_type=1, routed_scaling_factor=2.0)),
    "npu_moe_init_routing": _routing_sample,
    "npu_moe_finalize_routing": lambda: ((r(12, 16), r(6, 16, seed=1), r(6, 16, seed=2), None, r(6, 2, seed=3),
                                          torch.randperm(12).int(), None), {}),
    "npu_grouped_matmul": lambda: (([r(6, 8)], [r(3, 8, 4, seed=1)]),
                                   dict(group_list=torch.tensor([2, 5, 6]), group_type=0, split_item=2)),
}

#: opcheck's schema test compares the kernel's effect with the schema; this op updates its inputs in
#: place although its real schema declares no mutation (facts §2.4, as on the NPU)
MUTATES_UNDECLARED = {"npu_apply_rotary_pos_emb"}
