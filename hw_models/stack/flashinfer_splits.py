"""FlashInfer's partition-kv decode: how many CTAs share one sequence's KV cache (the `flashinfer` family).

FlashInfer plans each batch decode on the host (flashinfer-ai/flashinfer include/flashinfer/attention/
scheduler.cuh, BatchDecodeWithPagedKVCacheWorkEstimationDispatched): the grid is (chunks, KV heads) with room for
max_grid_size = blocks per SM x SMs CTAs (the kernel's occupancy). Where batch x KV heads already fills it, no
sequence is split; otherwise PartitionPagedKVCacheBinarySearchMinNumPagePerBatch finds the smallest chunk, at
least 128 tokens (max(128 / page_size, 1) pages), for which the chunks of every sequence times the KV heads fit
the grid, and a split call merges the chunks' partial states in a second kernel (VariableLengthMergeStates).
The occupancy is the one figure the tables do not give: `blocks_per_sm` is fitted (scripts/fit_kernels.py).
Under CUDA graphs FlashInfer launches its partition-kv kernel and the merge even for one chunk, but the measured
rows show no step until a sequence is cut in two (129 tokens), so only a split call is charged the merge.
"""

from __future__ import annotations

MIN_CHUNK_TOKENS = 128     # max(128 / page_size, 1) pages: 128 tokens whatever the page size (page_size <= 128)


def flashinfer_chunks(batch: int, kv_heads: int, sms: int, kv_len: int, blocks_per_sm: int) -> int:
    """Chunks per sequence of a uniform batch of `kv_len`-token caches (the binary search's answer, in tokens)."""
    slots = blocks_per_sm * sms
    if batch * kv_heads >= slots:
        return 1
    per_seq = slots // (batch * kv_heads)                  # chunks a sequence may have and still fit the grid (>= 1)
    chunk = max(MIN_CHUNK_TOKENS, -(-kv_len // per_seq))    # the smallest chunk that gives no more than that
    return -(-max(kv_len, 1) // chunk)
