"""TensorRT-LLM's multi-block decode: how many CTAs share one sequence's KV cache (`trtllm_attention` families).

TensorRT-LLM's attention op runs multi-block mode by default (common/attentionOp.h `mMultiBlockMode = true`; the
PyTorch backend's thop op does not change it) and picks one of two decode kernels per call
(common/attentionOp.cpp enqueueGeneration, XqaDispatcher::shouldUse):

- XQA for grouped-query calls where it expects a gain (decoderXQAImplJIT::mayHavePerfGain:
  kv_heads x batch x max(1, kv_len / 128) x 4 >= SMs), one CTA per (sub-sequence, KV head, sequence); the
  sub-sequences per sequence from computeMultiBlockCount (decoderXQAImplCommon.h: 128 history tokens per block at
  least, at most round(sqrt(8 n)), shrunk to about 8 waves, at most 6000 / batch);
- masked multi-head attention otherwise (MHA calls, and grouped ones below XQA's threshold), one CTA per
  (tile, query head, sequence), the tiles per sequence from enqueueGeneration / multi_block_grid_setup
  (decoderMaskedMultiheadAttentionLaunch.h): as many as fill the SMs once, min(ceil((kv_len + 1) / 128),
  ceil(SMs / (batch x heads))), 128 timesteps per tile loop for head_dim 128 (256 threads, 16 threads a value).

Both merge their partial results inside the kernel (the last CTA of a sequence, behind a semaphore), so there is no
second launch. The formulas are read from NVIDIA/TensorRT-LLM's source (1.x); the tables do not say which release's.
"""

from __future__ import annotations

import math

XQA_MIN_TOKENS_PER_BLOCK = 128     # decoderXQAConstants.h kMinHistoryTokensPerBlock
XQA_TARGET_WAVES = 8               # kTargetWaveFactor
XQA_MAX_SUB_SEQS = 6000            # getXqaMaxNumSubSeq: sub-sequences of the whole batch
MMHA_TOKENS_PER_LOOP = 128         # 256 threads / 16 threads a value x 8 (head_dim 128, 16-bit)


def uses_xqa(batch: int, heads: int, kv_heads: int, sms: int, kv_len: int) -> bool:
    """Whether the op runs a decode call through XQA: grouped-query, and enough work (mayHavePerfGain)."""
    return heads != kv_heads and kv_heads * batch * max(1, kv_len // XQA_MIN_TOKENS_PER_BLOCK) * 4 >= sms


def xqa_blocks(batch: int, kv_heads: int, sms: int, kv_len: int) -> int:
    """XQA's sub-sequences per sequence (computeMultiBlockCount)."""
    n = kv_len // XQA_MIN_TOKENS_PER_BLOCK
    n = max(min(n, round(math.sqrt(n * XQA_TARGET_WAVES))), 1)
    waves = batch * kv_heads * n / sms / XQA_TARGET_WAVES
    if waves > 1:
        n = math.floor(n / waves)
    return max(min(max(n, 1), XQA_MAX_SUB_SEQS // batch), 1)


def mmha_tiles(batch: int, heads: int, sms: int, kv_len: int) -> int:
    """Masked MHA's tiles per (sequence, query head) in multi-block mode (multi_block_grid_setup)."""
    return max(min(math.ceil((kv_len + 1) / MMHA_TOKENS_PER_LOOP), math.ceil(sms / (batch * heads))), 1)


def trtllm_ctas(batch: int, heads: int, kv_heads: int, sms: int, kv_len: int) -> tuple[int, int]:
    """(CTAs of the call, sub-sequences per sequence) as TensorRT-LLM launches its decode kernel."""
    if uses_xqa(batch, heads, kv_heads, sms, kv_len):
        n = xqa_blocks(batch, kv_heads, sms, kv_len)
        return batch * kv_heads * n, n
    n = mmha_tiles(batch, heads, sms, kv_len)
    return batch * heads * n, n
