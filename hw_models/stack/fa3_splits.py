"""FlashAttention-3's split-KV count for a decode call on SM 8.x: how many CTAs share one (sequence, KV head)'s cache.

The FlashAttention-3 code base (Dao-AILab/flash-attention hopper/) also builds for SM 8.x, and that build is what
SGLang's `fa3` attention backend runs on Ampere (sglang python/sglang/srt/layers/attention/attention_registry.py
create_flashattention_v3_backend: SM 8.x for non-MLA models, SM 9.x). A decode call there is varlen (the
cache lengths come as seqused_k), so the split is chosen in two steps (hopper/flash_api.cpp get_num_splits,
hopper/flash_prepare_scheduler.cu prepare_varlen_num_blocks_kernel):

- a static upper bound, num_splits_heuristic (hopper/heuristics.h) as if the batch were one sequence: no split
  where the n-blocks are 4 or fewer, else the fewest splits within 85% of the best wave efficiency over the SMs;
- per sequence on the device, the n-blocks it has over the blocks each SM should take (total n-blocks x KV heads x
  1.1 / SMs, rounded up), capped by that bound.

On SM 8.x every call packs the query heads of a KV head into one m-block (get_pack_gqa: always for arch < 90),
so a decode call has one m-block per (sequence, KV head) at up to 128 query heads per KV head. Key blocks:
hopper/tile_size.h tile_size_fwd_sm8x, head_dim 128: 112 tokens where the call is split (varlen_and_split, 8
warps), 64 where it is not on SM 8.0 (128 on SM 8.6 / 8.9, 8 warps). hw_models.stack.attention_kernels uses the
count for the CTAs of the `split: fa3` families.
"""

from __future__ import annotations

import math

FA3_MAX_SPLITS = 128          # flash_api.cpp: num_splits_heuristic(..., 128)
SPLIT_EFFICIENCY = 0.85       # heuristics.h: the fewest splits within 85% of the best wave efficiency
DYNAMIC_MARGIN = 1.1          # flash_prepare_scheduler.cu: "10% margin" on the blocks per SM
MIN_SPLIT_N_BLOCKS = 5        # heuristics.h: num_n_blocks <= 4 never splits


def _block_n(split: bool, sm86_or_89: bool, head_dim: int) -> int:
    """tile_size_fwd_sm8x's kBlockN for a 2-byte, non-local call (head_dim <= 128; 64 above, a conservative
    stand-in for the larger head dims, which the decode tables do not have)."""
    if head_dim > 128:
        return 64
    if head_dim <= 64:
        return 80 if split else 112
    if head_dim <= 96:
        return 48 if split else 64
    return 112 if split else (128 if sm86_or_89 else 64)


def static_splits(kv_heads: int, sms: int, n_blocks: int) -> int:
    """num_splits_heuristic with total_mblocks = KV heads (the varlen bound: one sequence, one packed m-block)."""
    if kv_heads >= 0.8 * sms or n_blocks < MIN_SPLIT_N_BLOCKS:
        return 1      # the L2 branch of the first case needs >= 2 x SMs m-blocks: never for one decode token
    cap = min(FA3_MAX_SPLITS, sms, n_blocks)
    eff = [(w := kv_heads * s / sms) / math.ceil(w) for s in range(1, cap + 1)]
    return next(s for s, e in enumerate(eff, 1) if e >= SPLIT_EFFICIENCY * max(eff))


def fa3_num_splits(batch: int, kv_heads: int, sms: int, kv_len: int, head_dim: int = 128,
                   sm86_or_89: bool = False) -> int:
    """Splits per (sequence, KV head) of a uniform decode batch of `kv_len`-token caches on SM 8.x."""
    kv_len = max(kv_len, 1)
    bound = static_splits(kv_heads, sms, -(-kv_len // _block_n(True, sm86_or_89, head_dim)))
    n_blocks = -(-kv_len // _block_n(bound > 1, sm86_or_89, head_dim))
    per_sm = math.ceil(batch * n_blocks * DYNAMIC_MARGIN * kv_heads / sms)
    return max(min(-(-n_blocks // per_sm), bound), 1)
