"""Serial work per thread of the row-wise kernels eager PyTorch launches (hw_models.stack.spec `serial`).

Some small ops are not bound by bandwidth nor by a fixed floor but by how many values
one thread walks in sequence, which the kernel's launch configuration fixes from the
tensor's shape: (rows, row length) of the op's first input. Each function returns that
count; a stack multiplies it by its fitted `per_s` (the latency of one step of the
walk) and charges max(compute, memory, serial) (hw_models.stack.cost). 0 where the
library picks a different, parallel kernel for the shape.

Read off PyTorch's CUDA sources (aten/src/ATen/native/cuda), checked against the
H200 captures (traces/h200, kernel names in their Chrome traces):

* `index_rows`: index_select / F.embedding (Indexing.cu, index_select_out_cuda_impl):
  `numIndices <= 16` runs indexSelectSmallIndex, whose threads "iterate over indices"
  (one row after another); more indices run the parallel vectorized gather. H200:
  1.9, 3.9, 6.4, 11.3 us for 1, 4, 8, 16 rows, any hidden size; 1.7 us for 32 rows.
* `warp_row`: softmax over the last dim (SoftMax.cu, host_softmax): rows of
  `dim_size <= 2048` (and <= 8192 bytes) run softmax_warp_forward, one warp per row, each
  lane walking next_pow2(dim_size) / 32 elements; longer rows run a block per row (below).
* `block_row`: the block softmax of longer rows (SoftMax.cu, PyTorch 2.x main: host_softmax
  takes SoftMaxForward_getBlockSize(dim) = min(dim, 1024) threads rounded up to a warp
  multiple; potential_register_count = ceil(dim / threads) < 10 runs
  cunn_SoftMaxForwardReg<count>, which holds that many values per thread in registers,
  longer rows cunn_SoftMaxForwardSmem / cunn_SoftMaxForward, which walk the same
  ceil(dim / 1024) values per pass). H200: Llama-2-13B decode at kv 2049-2056 names
  cunn_SoftMaxForwardReg<c10::Half, float, c10::Half, ..., 3>, grid 40 x block 1024,
  2.46 us median. Each thread walks its values, then the block reduces twice (max, then
  sum of exp) through cuda_utils::BlockReduce (block_reduce.cuh) and blockReduceWarp:
  a 5-step warp shuffle, __syncthreads, lane 0 stores its partial, __syncthreads, warp 0
  loads the partials and shuffles 5 steps more, thread 0 stores the result, __syncthreads,
  every thread loads it. `block_reduce_cycles` counts what that chain adds to the warp
  kernel's own 5-step shuffle per reduction (hw_models.stack.spec.BlockReduce holds the cited
  latencies).
* `row_reduce`: a reduction over the contiguous last dim (mean in RMSNorm; Reduce.cuh,
  setReduceConfig): a block of <= 512 threads, block_height = rows (power of two, <= 16
  for 32-wide rows), block_width = the rest; a thread sums ceil(row / block_width)
  values, split across the block's warps when that is >= min(16 x block_height, 256).
  H200 decode reduce_kernel: 2.3, 3.7, 6.5, 9.0, 9.0 us at 8, 32, 80, 128, 128 values
  per thread (rows 1, 4, 8, 16, 32); Llama-2-70B (8 rows of 8192) splits to 16: 3.0 us.
  The split across blocks (values >= 256 after the warp split) needs rows of over
  65536 values, longer than any LLM hidden size: not modelled.

Engine kernels that run one block per token (vLLM's csrc, which sarathi-serve keeps;
the RTX A6000 traces of vidur's profiler name them, maveriq-a6000 kernel_summary.csv:
grid = tokens, block 1024 for rms_norm_kernel and silu_and_mul_kernel, 512 for
rotary_embedding_kernel). Read from the op's dims (tokens, hidden, heads), not its
input, whose row is gate and up side by side in a fused gate_up:

* `token_block`: rms_norm_kernel / act_and_mul_kernel (layernorm_kernels.cu,
  activation_kernels.cu): block(min(d, 1024)); each thread walks ceil(d / 1024) values
  (the norm twice: sum of squares, then scale; one fitted step covers both passes).
  Flat in the tokens while one wave of blocks fits the SMs: A100 silu_and_mul 7 us at
  d 11008 and 22 us at 28672, 1-64 tokens (vidur a100 mlp.csv); many tokens make
  it bandwidth-bound (the max with the memory term).
* `rope_block`: rotary_embedding_kernel (pos_encoding_kernels.cu):
  block(min(heads x rot_dim / 2, 512)); a thread walks the query pairs, then the key
  pairs: ceil(heads x hd/2 / block) + ceil(kv_heads x hd/2 / block).
"""

from __future__ import annotations

import math

SMALL_INDEX_MAX = 16            # Indexing.cu: numIndices <= 16 -> indexSelectSmallIndex
WARP_SOFTMAX_MAX = 2048         # SoftMax.cu: dim_size <= 2048 -> softmax_warp_forward
SOFTMAX_BLOCK_MAX = 1024        # SoftMax.cu: SoftMaxForward_getBlockSize, max_threads = 1024
WARP = 32
WARP_STEPS = 5                  # log2(32) shuffles of a warp reduction (block_reduce.cuh WarpReduce)
BLOCK_REDUCTIONS = 2            # cunn_SoftMaxForward*: the row max, then the sum of exp
REDUCE_THREADS = 512            # Reduce.cuh: max_reduce_threads for 4-byte accumulators
MIN_VALUES, MAX_VALUES = 16, 256
TOKEN_BLOCK = 1024              # rms_norm_kernel, act_and_mul_kernel: block(min(d, 1024))
ROPE_BLOCK = 512                # rotary_embedding_kernel: block(min(heads * rot_dim / 2, 512))


def _last_pow2(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def index_rows(rows: int, row: int) -> float:
    return float(rows) if rows <= SMALL_INDEX_MAX else 0.0


def warp_row(rows: int, row: int) -> float:
    if row > WARP_SOFTMAX_MAX:
        return 0.0
    return max(1 << (max(row, 1) - 1).bit_length(), WARP) / WARP


def softmax_block_threads(row: int) -> int:
    """SoftMaxForward_getBlockSize: min(row, 1024) rounded up to a whole warp."""
    return -(-min(max(row, 1), SOFTMAX_BLOCK_MAX) // WARP) * WARP


def block_row(rows: int, row: int) -> float:
    """Values each thread of the block softmax walks (0 where the warp kernel runs)."""
    if row <= WARP_SOFTMAX_MAX:
        return 0.0
    return float(math.ceil(row / softmax_block_threads(row)))


def block_reduce_cycles(warps: int, shfl: float, alu: float, lds: float, sts: float,
                        barrier: float, barrier_per_warp: float) -> float:
    """Cycles one block-wide reduction of `warps` warps adds to a warp reduction's
    5 shuffles: 5 more shuffle+op steps (warp 0 over the partials), 3 __syncthreads that
    wait for all `warps`, and 2 shared-memory store/load round trips (partials, result)."""
    return WARP_STEPS * (shfl + alu) + 3 * (barrier + barrier_per_warp * warps) + 2 * (sts + lds)


def row_reduce(rows: int, row: int) -> float:
    d0 = REDUCE_THREADS if row >= REDUCE_THREADS else _last_pow2(row)
    d1 = REDUCE_THREADS if rows >= REDUCE_THREADS else _last_pow2(rows)
    width = min(d0, WARP)
    height = min(d1, REDUCE_THREADS // width)
    width = min(d0, REDUCE_THREADS // height)
    values = math.ceil(row / width)
    if values >= min(height * MIN_VALUES, MAX_VALUES):
        values = math.ceil(values / height)
    return float(values)


def token_block(op) -> float:
    d = max(int(op.dims.get("hidden", 1)), 1)
    return float(math.ceil(d / min(d, TOKEN_BLOCK)))


def rope_block(op) -> float:
    half = max(int(op.dims.get("head_dim", 2)) // 2, 1)
    q = int(op.dims.get("heads", 1)) * half
    k = int(op.dims.get("kv_heads", op.dims.get("heads", 1))) * half
    block = min(q, ROPE_BLOCK)
    return float(math.ceil(q / block) + math.ceil(k / block))


WORK = {"index_rows": index_rows, "warp_row": warp_row, "row_reduce": row_reduce}
BY_DIMS = {"token_block": token_block, "rope_block": rope_block}   # walks read off the op's dims


def rows_of(op) -> tuple[int, int]:
    """(rows, row length) of `op`'s first input: its last dim is the row."""
    t = op.reads[0]
    row = t.shape[-1] if t.shape else 1
    return t.elements // max(row, 1), row


def serial_values(work: str, op) -> float:
    if work in BY_DIMS:
        return BY_DIMS[work](op)
    return WORK[work](*rows_of(op))
