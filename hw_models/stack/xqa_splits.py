"""TensorRT-LLM's multi-block decode: how many sub-sequences XQA cuts one (sequence, KV head)'s cache into.

TensorRT-LLM runs its decode attention in multi-block mode by default (attentionOp.h mMultiBlockMode): a sequence
whose history is long enough is cut into sub-sequences of at least kMinHistoryTokensPerBlock tokens, each a CTA,
whose partial results the kernel merges at the end (a scratch buffer zeroed before every call, the last CTA of a
(sequence, KV head) reducing the others'). The count (cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/
decoderXQAImplCommon.h computeMultiBlockCount, with the XQA constants header's kMinHistoryTokensPerBlock,
kTargetWaveFactor and getXqaMaxNumSubSeq):

    n = history // 128;  n = min(n, round(sqrt(8 n)));  n = max(n, 1)
    waves = batch x KV heads x n / SMs;  n = floor(n / (waves / 8)) where waves > 8 (kTargetWaveFactor);  n >= 1
    n = max(min(n, 6000 // batch), 1)   (the reserved sub-sequence workspace)

with the history the tokens already cached (kv_len - 1 for one new token). hw_models.stack.attention_kernels prices
the merge (`combine_s`) where n > 1; the CTA terms keep one CTA per (sequence, KV head) (module doc there).
"""

from __future__ import annotations

import math

MIN_HISTORY_TOKENS_PER_BLOCK = 128    # kMinHistoryTokensPerBlock
TARGET_WAVE_FACTOR = 8                # kTargetWaveFactor
MAX_SUB_SEQUENCES = 6000              # getXqaMaxNumSubSeq (not MLA): the workspace's sub-sequences, whole batch


def xqa_multi_block_count(batch: int, kv_heads: int, sms: int, kv_len: int) -> int:
    """Sub-sequences per (sequence, KV head) of a uniform decode batch of `kv_len`-token caches (module doc)."""
    n = max(kv_len - 1, 0) // MIN_HISTORY_TOKENS_PER_BLOCK
    n = max(min(n, round(math.sqrt(n * 8.0))), 1)
    waves = batch * kv_heads * n / sms
    if waves > TARGET_WAVE_FACTOR:
        n = max(math.floor(n / (waves / TARGET_WAVE_FACTOR)), 1)
    return max(min(n, MAX_SUB_SEQUENCES // max(batch, 1)), 1)
