"""The GPU work of sampling with top-p: a sort of every sequence's logits, each step (a software stack's
`top_p_sampler`).

A step that samples greedily (temperature 0: every benchmark client of this project's serving data but
ML.ENERGY's) takes an argmax over the logits: a read of the LM head's output, inside the kernels the graph
already has. With top-p, vLLM V1's PyTorch-native sampler (vllm/v1/sample/ops/topk_topp_sampler.py
`apply_top_k_top_p`, the default on CUDA from vLLM 0.11.1: FlashInfer's sampler off by default since
vllm-project/vllm#26859, "disabled by default and opt-in", #29415) sorts the fp32 logits of every row
(`logits.sort`), softmaxes and cumsums the sorted row, masks it and scatters it back, then softmaxes again and
draws with exponential noise (`random_sample`). The sort is most of it: vllm-project/vllm#11394 measured
top-p costing ShareGPT 15% of its throughput (47.40 -> 40.20 req/s) before FlashInfer's kernel.

How long. `torch.sort` over rows longer than 4096 runs aten/src/ATen/native/cuda/SortStable.cu
`launch_stable_sort_kernel`: fewer than 128 rows sort as one device-wide radix sort over every row (then
a stable sort by row), 128 rows or more as CUB's segmented radix sort, one thread block per row. So:

* `fixed_s`, once per step: the ~dozen kernels and allocations, timed with one row;
* `bytes_per_logit` at the device's peak DRAM rate, per logit (rows x vocabulary): the streaming part.
  The figure is what the published timings take, not a byte count: the sort does not stream at peak;
* from 128 rows, at least `block_s_per_logit` x the vocabulary: the segmented sort's one wave, each
  block sorting its row alone, is latency-bound until the rows fill the GPU's blocks.

Fitted by least squares (tests/test_sampler.py re-derives them) on timings of `apply_top_k_top_p` alone
(top-p 0.9 on every row, vocabulary 131072; benchmarks/benchmark_topk_topp.py, PyTorch column), none of
them this project's serving data: vllm-project/vllm#42191 (H100: 1 row 0.128 ms), #33538 (the same
author's H100 sweep: 512 rows 8.787 ms, 1024 rows 16.312 ms), #51507 (the same script on H200: 64 rows
1.132 ms, 128 rows 4.180 ms, 512 rows 6.194 ms). The 512-row time scales with the DRAM rate between the
two GPUs (8.787 / 6.194 = 1.42, 4.8 / 3.35 TB/s = 1.43), which is why the streaming part is charged at it.
The timings are of the masking alone. The rest of vLLM's sampler streams the rows a few more times, counted
from its code (vllm/v1/sample/sampler.py, topk_topp_sampler.py `random_sample`) as `draw_bytes_per_logit`
at the DRAM rate: the LM head's bf16 logits to fp32 (2 + 4 B), the temperature divide (4 + 4), the softmax
after the mask (4 + 4 + 4: a max and sum pass, then the write), the exponential noise (4), the divide by it
(4 + 4 + 4) and the argmax (4): 46 bytes a logit.

Energy: the time is the device's, busy at boost clock (Mapper.gap_j), and `dram_bytes_per_logit` is what the
kernels move (counted from the code above: the sort's passes over keys, int64 indices and their
scratch, ~170 bytes; the softmaxes, cumsum, mask, scatter, noise and argmax ~90), at the memory's
energy per byte.

Every tensor-parallel rank samples the whole vocabulary (vLLM V1 all-gathers the logits on CUDA:
LogitsProcessor._gather_logits, Platform.use_all_gather), so the time is not divided by TP.

Penalties (a workload's `penalties: true`, the stack's `penalties`: `PenaltyPass`). A request with a repetition,
frequency or presence penalty makes vLLM run `apply_all_penalties` over the whole batch every step
(vllm/v1/sample/sampler.py `apply_penalties`, `no_penalties` is False while any running request has one; vllm/v1/
sample/ops/penalties.py, vllm/model_executor/layers/utils.py `apply_penalties`, whose own comment reads "The
penalties implementation is currently quite inefficient"). Its GPU work, counted per (row x vocabulary) entry
from that code on fp32 logits: for the prompt's and the output's tokens each, a zeroed int64 bin-count tensor
(write 8 B), a scatter of the tokens into it and a `> 0` mask (read 8, write 1): 2 x 17 B; the repetition
kernel (`apply_repetition_penalties`: logits and both masks read, logits written: 10 B); the frequency term
(int64 counts x a float: read 8, write 4; the subtraction from the logits: read 8, write 4) and the presence
term (bool mask x a float: read 1, write 4; its subtraction 12): 85 B an entry in 15 kernels (the two bin
counts' zeros, ones_like, scatter and mask, the placeholder fill's compare and masked_fill, the repetition
kernel, two products, two subtractions). The kernels run eagerly after the model's graph (the sampler is not
captured); `fixed_s` is their count at ~2 us each (an assumption of the order of this project's fitted H100
kernel floors, 2-3.3 us). Scatters over the padded token tensors (rows x longest prompt or output) and their
host-side padding (`make_tensor_with_pad` each step, the prompt tensor each time the batch changes) are left
out: per token of history, not per vocabulary entry; ML.ENERGY's long-output runs (8,000-token gpqa outputs
at the same per-sequence host cost as 400-token chats, scripts/fit_v1_host.py) show no such term on H100.
"""

from __future__ import annotations

from pydantic import Field

from sim.core.schema import Quantity, Strict

SEGMENTED_ROWS = 128   # SortStable.cu: below it the device-wide sort, from it CUB's segmented sort
SAMPLER = "sampler"    # its busy entry in a serving iteration's cost (sim.apps.serve.stepcost)


def mask_seconds(rows: int, vocab: int, dram_bytes_per_s: float, fixed_s: float, bytes_per_logit: float,
                 block_s_per_logit: float) -> float:
    """The sort and mask alone (what the published timings measure): fixed + the stream at the DRAM rate, from
    SEGMENTED_ROWS rows at least the segmented sort's one wave (module doc)."""
    stream = rows * vocab * bytes_per_logit / dram_bytes_per_s
    if rows >= SEGMENTED_ROWS:
        stream = max(stream, vocab * block_s_per_logit)
    return fixed_s + stream


class TopPSampler(Strict):
    cite: str
    fixed_s: Quantity = Field(ge=0)                 # per step
    bytes_per_logit: float = Field(gt=0)            # at the peak DRAM rate
    block_s_per_logit: Quantity = Field(ge=0)       # the segmented sort's one-wave floor, per logit of a row
    draw_bytes_per_logit: float = Field(default=0.0, ge=0)   # the rest of the sampler, at the peak DRAM rate
    dram_bytes_per_logit: float = Field(ge=0)       # moved, for the energy

    def seconds(self, rows: int, vocab: int, dram_bytes_per_s: float) -> float:
        """Device seconds of one step's top-p sampling over `rows` rows of `vocab` logits."""
        if rows <= 0:
            return 0.0
        return (mask_seconds(rows, vocab, dram_bytes_per_s, self.fixed_s, self.bytes_per_logit, self.block_s_per_logit)
                + rows * vocab * self.draw_bytes_per_logit / dram_bytes_per_s)

    def dram_bytes(self, rows: int, vocab: int) -> float:
        return max(rows, 0) * vocab * self.dram_bytes_per_logit


class PenaltyPass(Strict):
    """vLLM's repetition / frequency / presence penalties over a step's logits (module doc): streaming passes
    over rows x vocabulary at the peak DRAM rate, as the sampler's draw."""

    cite: str
    fixed_s: Quantity = Field(ge=0)               # per step: the pass's kernels
    bytes_per_logit: float = Field(gt=0)          # moved, counted from the code; timed at the peak DRAM rate

    def seconds(self, rows: int, vocab: int, dram_bytes_per_s: float) -> float:
        """Device seconds of one step's penalties over `rows` rows of `vocab` logits."""
        return self.fixed_s + rows * vocab * self.bytes_per_logit / dram_bytes_per_s if rows > 0 else 0.0

    def dram_bytes(self, rows: int, vocab: int) -> float:
        return max(rows, 0) * vocab * self.bytes_per_logit


def step_sampling(top_p: TopPSampler | None, penalties: PenaltyPass | None, rows: int, vocab: int,
                  dram_bytes_per_s: float) -> tuple[float, float]:
    """Device seconds and DRAM bytes of one step's sampling work beyond an argmax: the top-p sort and the
    penalties where the workload asks for them (None: not asked, or not modelled on the stack)."""
    seconds = dram = 0.0
    for part in (top_p, penalties):
        if part is not None and rows > 0:
            seconds += part.seconds(rows, vocab, dram_bytes_per_s)
            dram += part.dram_bytes(rows, vocab)
    return seconds, dram
