"""FlashAttention-2's split-KV count for a decode call: how many CTAs share one (sequence, KV head)'s cache.

FA2 splits the keys of a call across CTAs when the call alone cannot fill the GPU, then merges the partial
results in a second kernel (vllm-project/flash-attention csrc/flash_attn/flash_api.cpp, set_params_splitkv and
num_splits_heuristic). hw_models.stack.attention_kernels uses the count for the `flash_attn2` family's CTAs.
"""

from __future__ import annotations

import math

FA2_MAX_SPLITS = 128      # flash_api.cpp: TORCH_CHECK(params.num_splits <= 128)


def fa2_num_splits(batch_heads_mblocks: int, sms: int, kv_len: int, head_dim: int = 128) -> int:
    """FlashAttention-2's split-KV count for a decode call (vllm-project/flash-attention csrc/flash_attn/
    flash_api.cpp, set_params_splitkv and num_splits_heuristic): 2 CTAs per SM (128-thread blocks), key blocks of
    256 / 128 / 64 tokens for head_dim <= 64 / 128 / more; none where the CTAs already fill 80% of those slots;
    else the fewest splits whose wave efficiency (waves / ceil(waves)) is within 85% of the best, counting only
    splits that change the blocks per split."""
    slots = 2 * sms
    if batch_heads_mblocks >= 0.8 * slots:
        return 1
    block_n = 256 if head_dim <= 64 else (128 if head_dim <= 128 else 64)
    n_blocks = -(-max(kv_len, 1) // block_n)
    cap = min(FA2_MAX_SPLITS, slots, n_blocks)

    def eligible(s: int) -> bool:
        return s == 1 or -(-n_blocks // s) != -(-n_blocks // (s - 1))

    eff = {s: (w := batch_heads_mblocks * s / slots) / math.ceil(w) for s in range(1, cap + 1) if eligible(s)}
    best = max(eff.values())
    return next((s for s, e in eff.items() if e >= 0.85 * best), 1)
