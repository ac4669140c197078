"""The aiconfigurator per-op section of docs/validation.md (called by scripts/validation_report.py).

Every table of shared/validation/aic costed by `sim validate --input-format aic` (sim.apps.trace.aic):
MAPE per op family per GPU, "before" (the stacks and collectives as they were before issue 28:
no attention kernel family, the host launch on every graph-replayed kernel, ring all-reduce on
the datasheet/vidur topology) and "after". The H100, A100, RTX PRO 6000 and L40S tables are in
sample (scripts/fit_kernels.py fits on them; L40S only its own families, scripts/fit_kernels_ada.py);
H200 and Blackwell datacenter tables, where present, are held out and reported apart.

    SIM_SHARED_VALIDATION=/path/to/shared/validation python scripts/validation_aic.py
    ... python scripts/validation_aic.py --write   # splice the section into docs/validation.md
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from md_table import pct, table  # noqa: E402  (scripts/, beside this file)
from sim.apps.script_help import script_args  # noqa: E402
from sim.apps.trace.aic import HELD_OUT, table_of, validate_tables  # noqa: E402
from sim.core.errors import ConfigError  # noqa: E402
from sim.core.shared_data import shared_validation_dir  # noqa: E402

def _tables(shared: Path) -> list[Path]:
    folder = shared / "aic"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.csv.gz") if _is_table(p))   # not quant_*, llama_*, silicon_*


def _is_table(path: Path) -> bool:
    try:
        table_of(path)
        return True
    except ConfigError:
        return False


NOTES = """What moved, and what did not:

* Collectives: NCCL as the faster of two fitted alpha-beta lines per group size (its small- and large-message
  protocols), the engines' one-shot / two-shot custom all-reduce with the size thresholds of their source
  (hw_models/network/engine_collectives.py). Fitted on these tables, so the per-op figures are in sample. The
  `vllm`, `sglang` and `trtllm` stacks run their engine's custom all-reduce by default (`all_reduce:`), with the
  rest of what a TP step pays per collective (waiting for the slowest rank) as the serving term
  `engine_overheads.per_collective_s`, fitted on the H100 silicon sample (docs/serving.md). `vllm-v0` keeps the ring:
  with the custom kernel and no such term (`sim run` has none) the held-out LLM-Inference-Bench 70B TP4 end-to-end
  latency MAPE went 12.2% -> 22.7% (every row too fast; docs/parallelism.md). `parallel.algorithm` overrides it per
  workload.
  An engine's custom all-reduce rows are reported per release: on RTX PRO 6000
  (PCIe) the older releases' 2-GPU rows (vLLM 0.19.0, SGLang 0.5.10, TensorRT-LLM 1.3.0rc10) take ~2.5x the
  latest release's time at every size, NCCL fallback included (1 GB: 70 ms against 27 ms), 55-65% off, while the
  latest releases are within 4.6-6.7% (where 4 and 8 PCIe GPUs hand every message to NCCL, as the engines'
  source says). Three engines' kernels cannot all take the same 2.5x (older/latest at 1 MB: vLLM 3.04, SGLang
  3.01, TensorRT-LLM's NCCL 2.02; at 64 MB 2.39 / 2.40 / 2.40, where all three hand the message to NCCL): these
  rows were taken on a slower machine, not fitted on, no per-release factor. A row whose kernel_source names the
  kernel it ran is costed with it (SGLang 0.5.6.post2 on H100 ran TensorRT-LLM's: 22.3% -> 13.7%).
  SGLang by release (engine_collectives.sglang_algorithm): before 0.5.12 vLLM's kernel; from 0.5.12 (sglang PR
  #24363) its JIT CustomAllReduceV2 (custom_all_reduce_v2.py THRESHOLD_2_SHOT_MAP: one-shot up to 16 MiB at 2
  GPUs, 384 KiB at 4, 160 KiB at 8, two-shot above, NCCL above 16 MiB), algorithm `sglang_custom`, fitted on
  H100 0.5.14's rows (no other in-sample table has V2 on NVLink): H100 0.5.14 34.0% -> 5.4%. V2 needs full
  NVLink: on PCIe 0.5.12 runs NCCL (PR #24742 turned the custom backend off, issue #25649; PR #25650 restored
  the v1 fallback after it): L40S 0.5.12 267.8% -> 263.6%, its 2-GPU rows 30.3% -> 17.6% (4 KB-256 MB; ~16% slower
  than nccl-tests there, as TensorRT-LLM's NCCL rows are 1.15x at 1 MB). Its 4- and 8-GPU rows stay missed: they
  reach 21 GB/s of bus bandwidth at 1 GB where NCCL, and every other release's rows on this table (all NCCL:
  >2 PCIe GPUs), reach 2-4 GB/s (8 GPUs 256 MB: 22.7 ms against nccl-tests' 343 ms): another machine, not fitted.
  L40S vLLM / SGLang 0.5.10 / 0.5.14 (21-23%) miss at 4 and 8 GPUs only (2 GPUs 4.4-4.9%), where they run NCCL
  and their rows disagree with nccl-tests' on the same table both ways (vLLM 256 MB: 4 GPUs 108.5 ms against
  75.5 ms, 8 GPUs 240 ms against 343 ms): no engine source shows another path, so not fitted. The `sglang`
  stack keeps vLLM's kernel (its serving runs are SGLang 0.5.1-0.5.8); `parallel.algorithm: sglang_custom` selects V2.
* bf16 GEMM: graph-replayed kernels pay `graph_gap_s` (1.19 us, the pooled median; by GPU H100 0.93, A100 3.43,
  RTX PRO 6000 -0.23 us) instead of the preset's 3-4 us launch; on A100, H100 and RTX PRO 6000 the dense GEMM is a
  kernel family per GPU (dense_bf16_<gpu> in hw_models/stack/kernel_families_fitted.yaml, named by the preset's
  `efficiency.dense_gemm`), fitted by scripts/fit_kernels.py on that GPU's rows of all three engines as the
  quantized families are, with the K-walk: floor A100 5.8 / H100 3.32 / RTX PRO 6000 3.73 us, weight stream
  0.78 / 0.85 / 0.84 of the DRAM peak, fraction of the bf16 peak on the DRAM rows 0.65 / 0.59 / 0.57 at M = 256 and
  0.82 / 0.80 / 0.79 at M = 8192 (stop 54; below). H200 (same die as H100, no table) keeps the roofline with the gap (named on it,
  the H100's family reads 15.7% on this project's own H200 graph-timed bf16 GEMMs against the roofline's 8.3%: the H200 section). Held out
  by GPU (`--hold-out GPU`: fitted on the other two pooled) H100 12.1%, A100 21.7%, RTX PRO 6000 14.4% (stop 54's
  two curves; one curve 13.0 / 17.3 / 14.9%; before
  the per-engine copies, the fitted replay L2 rate and the K-walk: 15.9 / 14.1 / 15.8%): the figures do not
  carry across GPUs well enough, so GPUs without a named family keep the roofline with the gap.
  The tables replay one GEMM: the collector cycles through copies of the weights (TensorRT-LLM
  max(1, min(5, ceil(L2 / W))), aiconfigurator collector/trtllm/collect_gemm.py run_gemm; vLLM and SGLang 6, vLLM's
  fp8_block and nvfp4 1: collector/vllm and collector/sglang collect_gemm.py, outside_loop_count), so weights whose
  copies fit the L2 stay in it across replays, each row with its own engine's count (hw_models.stack.cost.
  replay_weight_copies). Under that condition only (`single_layer_replay`, set by `--input-format aic`, never by
  serving) such weights stream at the dense family's fitted replay L2 rate (`replay_l2_bytes_per_s`: H100 5.04,
  A100 2.0, RTX PRO 6000 4.32, L40S 2.72 TB/s, against the presets' assumed 23.35 and 16.96 TB/s on the last two)
  or else the preset's L2 rate (hw_models.stack.cost.replay_weight_l2_s; none cited on H100 and A100: DRAM), and the
  families are fitted with it (first with 5 copies on every engine and the presets' rates): RTX PRO 6000 bf16 fit 17.5% -> 11.8% (its floor was pulled to 0.9 us by rows the
  L2 served, where rows past it show 5-7 us), L40S 22.6% -> 16.1%, TensorRT-LLM FP8 12.1% -> 7.8%; held out by GPU
  RTX PRO 6000 bf16 24.1% -> 15.8%, A100 23.4% -> 14.1%, H100 13.2% -> 15.9%. Serving prices the same family with
  the DRAM stream; on the RTX PRO 6000 rows that stream from DRAM (5208 of 10752) the refit is 8.8% -> 7.4% (M
  256-512: mean error +7.9% -> +1.5%, M 1024-2048 +6.8% -> +3.9%), so the RTX PRO 6000 vLLM serving run moving
  faster (docs/serving.md) is the old family's excess at prefill M removed, not the L2 term leaking into serving.
  A wave-quantization term (compute x waves x SMs / tiles, tiles = ceil(M / tm) ceil(N / tn), fixed tiles
  64x64 to 256x128) does not mend it: it raised the MAPE of every GEMM family tried, in sample and held out by
  GPU (RTX PRO 6000 bf16 17.5% -> 33-101%, H100 8.5% -> 14-47%, vLLM FP8 17.5% -> 21-34%): the libraries pick
  tiles and split K for few-tile shapes, which one fixed tile does not see. Not kept.
  **Two curves, DRAM and L2 (issue 28, stop 54).** A replayed table holds two populations: rows whose weights
  stream from DRAM, as every layer of a model does, and rows whose weight copies stay in the L2. One fraction
  curve over both fitted neither: at M = 128 on the RTX PRO 6000 (its 128 MB L2 holds 5,348 of its 10,752 bf16
  rows) the L2 rows reach 0.45 of the peak, the DRAM rows 0.34, and the one curve read 0.46, so a model's decode
  GEMMs at 64-256 sequences ran fast (the one curve on the measured rows at M = 128 with N and K of 4096-16384:
  3-23% fast). Each dense family now has `rate_points` fitted on its DRAM rows only (what serving and `sim run`
  use) and `l2_rate_points` on the L2 rows (only `--input-format aic` replays read them), held at or above the
  DRAM curve so that a replayed GEMM whose weights outgrow the L2 never gets faster per FLOP (unconstrained, the
  L2 rows of small matrices fall below the DRAM curve at large M: fewer output tiles); floor, stream and K-walk
  stay fitted on all rows (hw_models.stack.kernel_families, scripts/fit_kernels.py `split_l2`). MAPE on each
  GPU's DRAM rows, one curve -> two: H100 6.67 -> 6.68%, A100 7.83 -> 7.73%, RTX PRO 6000 5.94 -> 5.09%, L40S 8.76%
  (two curves); on all rows (the per-op table above) H100 7.94 -> 7.99%, A100 8.95 -> 8.96%, RTX PRO 6000 9.37 ->
  9.63% (the L2 curve's floor costs its L2 rows), L40S 12.41 -> 12.11%. Held out by GPU (`--hold-out`, pooled on
  the other two): H100 13.0 -> 12.1%, RTX PRO 6000 14.9 -> 14.4%, A100 17.3 -> **21.7%**: worse, at M 16-128
  (33.5%): the pooled DRAM curve there comes from H100 and RTX PRO 6000, whose small-M kernels reach a smaller
  share of their larger peaks (H100 0.18 at M = 64 against A100's own 0.30); the one curve's L2 rows had lifted it
  towards A100's by chance. A fraction of the peak does not carry across architectures either way, which is why
  no preset uses a pooled family. The serving check this serves: the RTX PRO 6000 vLLM 0.19 run (docs/serving.md)
  TTFT / TPOT / throughput -21.5 / -9.4 / +8.6% -> -19.7 / -8.2 / +7.4%; its decode steps are still ~8% fast at
  every batch (per request, TPOT -8 to -10% from the first second to the last), which no GEMM curve explains
  alone (attention is 59% of its 128-sequence decode step).
* Decode attention: fixed + per-CTA + KV stream per family and KV format (hw_models/stack/attention_kernels.py),
  fitted on each family's own engine rows (TensorRT-LLM's, vLLM's FlashAttention). The fixed cost is mostly SM
  cycles (`clock_hz` on the GPU presets), and the KV stream reaches its rate only with enough CTAs in flight
  (CTAs / (CTAs + kv_ramp_ctas)). TensorRT-LLM 1.0's grouped-query rows on A100 stream 1.45x the A100's DRAM peak
  at > 1 GB of KV (they cannot read the cache they name): left out of the fit, still costed here.
* Single-layer replay (issue 28): the collector replays ONE attention call in a CUDA graph, so a KV cache no
  larger than the L2 is re-read from L2 (RTX PRO 6000 rows of exactly 128 MiB run at 2.5 TB/s median, 1.4x its
  DRAM peak; 160 MiB at DRAM speed). That is the measurement, not serving (there every other layer evicts the
  cache): only this per-op path declares it (`single_layer_replay`, set by sim.apps.trace.aic; no stack file sets
  it, so serving streams every cache from DRAM as before). Under it a cache <= `l2_bytes` streams at the unit's
  `l2_bandwidth_bytes_per_s` (same CTA ramp) instead of DRAM; the fit's stage 2 (fixed and per-CTA costs) sees
  those rows with that term. Only the RTX PRO 6000 declares a rate, ASSUMED (the A100
  whitepaper's 5120 B/clk per 108 SMs x 188 SMs x 2.617 GHz = 23.35 TB/s; no Blackwell figure cited), and the
  rows say it is too high: its rows that fit run ~2.5 TB/s at most; the family's `l2_stream_efficiency` (fitted in
  stage 2, at most 1) now carries the measured rate (0.12-0.21 of the cited one: 2.9-4.9 TB/s; see the next
  bullet). A100 and H100 carry `l2_bytes`
  but no rate: the A100 whitepaper's 7.22 TB/s predicted its 16-64 MB rows 31-37% fast, and neither GPU's rows
  show a gain over DRAM (their small caches are overhead-bound). MAPE by KV size at the previous stop, before any
  of the next bullet (|error|, before -> after; "fits
  L2": KV <= the GPU's L2; KV = batch x kv_len x kv_heads x head_dim x 2 x bytes per element):

| GPU | KV, engine | < 16 MB | 16-128 MB | 128-256 MB | >= 256 MB | fits L2 | all |
|---|---|---:|---:|---:|---:|---:|---:|
| a100 | bf16 [sglang] | 14% -> 13% | 26% -> 24% | 29% -> 28% | 29% -> 30% | 16% -> 15% | 20.4% -> 19.5% |
| a100 | bf16 [trtllm] | 19% -> 17% | 26% -> 23% | 21% -> 21% | 37% -> 38% | 21% -> 19% | 24.6% -> 23.5% |
| a100 | bf16 [vllm] | 20% -> 19% | 20% -> 20% | 16% -> 17% | 15% -> 16% | 20% -> 20% | 19.1% -> 18.9% |
| h100 | bf16 [sglang] | 21% -> 29% | 26% -> 31% | 13% -> 16% | 15% -> 17% | 24% -> 31% | 20.0% -> 25.7% |
| h100 | bf16 [trtllm] | 16% -> 14% | 22% -> 18% | 15% -> 13% | 10% -> 12% | 17% -> 15% | 16.0% -> 14.1% |
| h100 | bf16 [vllm] | 8% -> 7% | 14% -> 15% | 7% -> 9% | 13% -> 15% | 10% -> 10% | 10.1% -> 10.6% |
| h100 | fp8 [sglang] | 14% -> 12% | 16% -> 15% | 19% -> 19% | 20% -> 20% | 14% -> 13% | 15.7% -> 14.7% |
| h100 | fp8 [trtllm] | 24% -> 28% | 25% -> 25% | 17% -> 17% | 15% -> 15% | 24% -> 28% | 22.0% -> 24.5% |
| h100 | fp8 [vllm] | 12% -> 10% | 14% -> 13% | 10% -> 10% | 5% -> 5% | 12% -> 11% | 11.3% -> 10.0% |
| rtx_pro_6000 | bf16 [sglang] | 25% -> 15% | 77% -> 27% | 119% -> 51% | 1% -> 4% | 50% -> 22% | 38.5% -> 17.7% |
| rtx_pro_6000 | bf16 [trtllm] | 15% -> 18% | 65% -> 28% | 110% -> 49% | 5% -> 6% | 39% -> 24% | 30.8% -> 19.9% |
| rtx_pro_6000 | bf16 [vllm] | 19% -> 20% | 35% -> 39% | 65% -> 59% | 7% -> 8% | 27% -> 29% | 23.3% -> 24.7% |
| rtx_pro_6000 | fp8 [sglang] | 23% -> 18% | 42% -> 34% | 67% -> 53% | 6% -> 8% | 32% -> 26% | 27.7% -> 22.7% |
| rtx_pro_6000 | fp8 [trtllm] | 26% -> 24% | 52% -> 50% | 71% -> 63% | 10% -> 12% | 37% -> 34% | 32.6% -> 30.6% |
| rtx_pro_6000 | fp8 [vllm] | 26% -> 13% | 45% -> 30% | 89% -> 53% | 3% -> 5% | 36% -> 21% | 31.2% -> 18.5% |

  Held out by GPU (`scripts/fit_kernels.py --hold-out GPU`, fitted on the other two; before -> after): vLLM
  FlashAttention bf16 H100 10.7 -> 13.5%, A100 19.3 -> 21.2%, RTX PRO 6000 23.2 -> 27.3% (worse: the pooled fit
  takes the PRO 6000's L2 rows at the too-high rate); TensorRT-LLM bf16 H100 19.8 -> 14.6%, A100 (MHA rows) 20.3
  -> 19.6%, RTX PRO 6000 37.1 -> 20.3%; TensorRT-LLM FP8 KV H100 33.7 -> 49.8% (fitted on RTX PRO 6000 alone), RTX
  PRO 6000 37.2 -> 39.0% (fitted on H100 alone). Where the residual sits: A100 and RTX PRO 6000 batches 1-8 run 12-28%
  fast; H100 vLLM batches 16-64 10-14% slow; SGLang's fa3 rows on H100, costed with the FlashAttention family
  fitted on vLLM's, are 14-33% slow at every batch (its decode call is cheaper than vLLM's at every size: an
  engine cost, not the kernel's).
* Decode attention, the residual broken down (scripts/attn_residuals.py: signed error by batch, KV length, head
  layout, KV bytes and CTAs per SM, per engine and KV format) and four mechanisms added. (1) The L2 stream of a
  single-layer replay at a fitted fraction of the cited L2 rate (above): the RTX PRO 6000 rows of every engine
  were 30-80% fast along the diagonal of equal KV bytes below 128 MiB (batch x kv_len constant), where they read
  the L2 at ~2.5 TB/s, not 23 TB/s. (2) TensorRT-LLM runs MHA models through masked MHA and grouped-query ones
  through XQA, two kernels: they stream at their own efficiency and ramp (`mha_kv_stream_efficiency`,
  `mha_kv_ramp_ctas`; H100 FP8-KV rows of >= 1 GB: 0.73 of the DRAM peak through masked MHA, 0.90 through XQA).
  (3) TensorRT-LLM on SM 12.x is a family of its own (`trtllm_attention_sm120`, the trtllm stack's
  attention_rules): its FP8-KV grouped-query calls do not split the sequence across CTAs (XQA's multi-block mode
  elsewhere): 85 / 320 / 1260 us at 8K / 32K / 128K tokens for batch 1-8 and 1-8 KV heads alike, a serial walk of
  9.5 ns (25 SM cycles) per token (`kv_walk_s_per_token`, the KV term is the larger of the walk and the stream).
  (4) SGLang on Hopper runs sgl-kernel's own FA3 build (`sglang_fa3`, fitted on its H100 fa3 rows): cheaper calls
  than vLLM's FA3 (bf16 rows 14-33% below the flash_attn family) and an FP8-KV stream at 0.63 of the peak (vLLM's
  0.84). And a bug: the GPU mapper's cost cache keyed an op by its FLOPs, bytes and query shape, so a decode with 8
  KV heads of FP8 cache took the cost of one with 4 of bf16 costed before it by the same mapper (per-op tables
  cost both; one model in serving never does): the previous stop's FP8 figures carried it (H100 vLLM FP8 10.6% ->
  6.8% from the fix alone). MAPE per engine (previous stop -> now; in sample): H100 bf16 SGLang 25.7 -> 12.0,
  TensorRT-LLM 14.1 -> 14.0, vLLM 10.6 -> 9.7; H100 FP8 14.7 -> 7.1, 24.5 -> 14.8, 10.0 -> 6.8; A100 bf16 19.5 ->
  19.7, 23.5 -> 23.2, 18.9 -> 18.9; RTX PRO 6000 bf16 17.7 -> 10.9, 19.9 -> 11.8, 24.7 -> 17.5; FP8 22.7 -> 9.6,
  30.6 -> 9.9, 18.5 -> 13.6. Still missed: A100 (vLLM and SGLang at batches 1-4 and >= 2K tokens 25-43% fast,
  SGLang's flash_attention rows stream at 0.40-0.58 of the peak; TensorRT-LLM's grouped rows, left out of the fit,
  50-90% slow at large caches), vLLM's FA2 on RTX PRO 6000 at batches 1-4 and 2-32K tokens (15-48% fast: FA2's
  split-KV heuristic, not modelled then: the next bullet), and every engine's step between 128 and 512 tokens (a KV
  tile per CTA; FA2's is its split-KV combine kernel, the next bullet).
  Held out by GPU (`scripts/fit_kernels.py --hold-out GPU`; previous stop in brackets): FlashAttention bf16 H100
  10.9% (13.5), A100 19.8% (21.2), RTX PRO 6000 27.3% (27.3: its L2 rate is fitted on its own rows only);
  TensorRT-LLM bf16 H100 14.9% (14.6), A100 19.1% (19.6), RTX PRO 6000 20.3% (20.3, under trtllm_attention);
  trtllm_attention_sm120 and sglang_fa3 are fitted on their one in-sample GPU: none held out. The L40S rows
  (SM 8.9; no attention family is fitted on them) are out of sample for these changes, decode (previous stop ->
  now): bf16 SGLang 18.2 -> 13.0, TensorRT-LLM 18.3 -> 14.9, vLLM 19.6 -> 16.2; FP8 SGLang 20.6 -> 10.3, vLLM 14.4
  -> 11.2, TensorRT-LLM 40.1 -> 46.0: its FP8-KV grouped rows show the SM 12.x walk too (batch 1 at >= 8K tokens
  95% fast under trtllm_attention, now fitted on H100's FP8 rows alone); no SM 8.9 rule was shipped then, since it
  would have been chosen on these rows. Stop 44 ships it, fitted on the L40S rows (so the L40S is in sample for
  it, none held out): `trtllm_attention_sm89`, the trtllm stack's rule for the exact SM version 8.9
  (`attention_rules: capability`), with the unsplit walk: the L40S FP8-KV grouped rows at batch 1 take 139 / 271 /
  533 / 1057 / 2106 us at 8K / 16K / 32K / 64K / 128K tokens for every head layout from 4 / 1 to 64 / 8 (16.1 ns a
  token). TensorRT-LLM L40S decode FP8 49.7 -> 15.6%, bf16 11.8 -> 10.7%.
* FlashAttention-2 is not FlashAttention-3 (stop 47). vLLM runs FA3 on SM 9.0 and FA2 elsewhere
  (vllm/attention/utils/fa_utils.py get_flash_attn_version), but one `flash_attn` decode fit had pooled the H100's
  FA3 rows with the A100's and RTX PRO 6000's FA2 rows. The FA2 rows show two mechanisms of FA2's source
  (vllm-project/flash-attention csrc/flash_attn/flash_api.cpp) that FA3's do not:
  - MHA decode is not split: mha_varlen_fwd splits the KV only where seqlenq_ngroups_swapped (one query token
    and more query than KV heads). An MHA call keeps one CTA per (sequence, head) walking the whole cache: the A100
    rows at batch 1-4, 4/4 and 8/8 heads, take 3.02 ms at 128K tokens whatever the batch and heads (23 ns a token;
    RTX PRO 6000 19.6 ns, L40S 18.6 ns), where the same cache through FA3 on the H100 takes 0.10-0.22 ms.
    `mha_kv_walk_s_per_token` (fitted: 19 ns) is the MHA counterpart of the grouped-query walk above.
  - Grouped-query decode is split by num_splits_heuristic (2 CTAs per SM, 128-token key blocks at head_dim 128,
    the fewest splits within 85% of the best wave efficiency, at most 128), and a split call runs a second kernel
    to merge the partials: the rows step up at 129 tokens (one block -> two) at batch 1-8 on every FA2 GPU.
    `fa2_split` makes the CTAs of the ramp and the per-CTA cost count the splits (hw_models/stack/
    fa2_splits.py), and `combine_s` (fitted: 3.95 us) is paid where the call splits.
  `flash_attn2` carries both, fitted on the A100 and RTX PRO 6000 vLLM rows; the `vllm` stack picks it on SM 8.x
  and 12.x (attention_rules); `flash_attn` keeps FA3 decode, fitted on the H100 rows alone. Decode MAPE, bf16 KV,
  vLLM (before -> after): A100 18.9 -> 13.0%, RTX PRO 6000 17.6 -> 13.3%, H100 9.7 -> 9.8%; L40S (FA2, never
  fitted on for decode: held out) 16.3 -> 14.6%. Held out by GPU (`--hold-out`, fitted on the other FA2 GPU): A100
  19.8 -> 16.3%, RTX PRO 6000 27.3 -> 21.3%. SGLang's A100 flash_attention decode rows (which FlashAttention build
  ran was not established then) read closest under flash_attn2: 19.6 -> 17.5% (FA3's H100 figures 34%, sglang_fa3
  45%); stop 48 finds the build (below).
  Out of sample, the LLMServingSim vLLM 0.19 replays (TP1, Llama-3.1-8B; TTFT / TPOT / throughput, after the coupled
  refits of docs/energy.md, before the stream cap below): RTX PRO 6000 -21.8 / -9.4 / +9.4 -> -19.0 / -8.2 / +7.5%,
  back inside the +-20% TTFT band; RTX 4090 +9.3 / +6.5 / -6.6 -> +11.5 / +8.4 / -8.2%.
  Tried and not kept: TensorRT-LLM's multi-block decode counted the same way. Its source splits every call
  (attentionOp.h mMultiBlockMode = true): XQA for grouped-query calls with enough work (decoderXQAImplJIT::
  mayHavePerfGain), computeMultiBlockCount sub-sequences each (>= 128 tokens, <= round(sqrt(8 n)), about 8 waves);
  masked MHA otherwise, min(ceil((kv_len + 1) / 128), ceil(SMs / (batch x heads))) tiles; both merge in-kernel.
  Refitted with those CTAs, trtllm_attention's bf16 decode went H100 13.7 -> 17.3%, A100 18.3 -> 20.6% (rows not
  left out), RTX PRO 6000 12.1 -> 11.7%, FP8 H100 14.8 -> 18.6%: the counts read from a source of unknown release
  do not describe these rows, so trtllm_attention keeps CTAs = batch x KV heads.
* FlashInfer's partition-kv decode (stop 47). FlashInfer plans every batch decode on the host
  (flashinfer-ai/flashinfer include/flashinfer/attention/scheduler.cuh, BatchDecodeWithPagedKVCacheWorkEstimation
  Dispatched): a grid of (chunks, KV heads) with room for blocks per SM x SMs CTAs; where batch x KV heads leaves
  room, PartitionPagedKVCacheBinarySearchMinNumPagePerBatch cuts each sequence into the fewest chunks of at least
  128 tokens that fit, for MHA and grouped-query calls alike, and a second kernel merges them. The rows show it:
  SGLang's RTX PRO 6000 and L40S calls at batch 1-8 take one more ~2 us step from 129 tokens (RTX PRO 6000 8/1
  heads: 6.3 us at 64 tokens, 8.4 us at 256), where sim had read 20-30% fast up to 4K tokens. `split: flashinfer`
  (hw_models/stack/flashinfer_splits.py) counts the chunks' CTAs and charges `combine_s` (fitted: 1.94 us bf16,
  1.52 us FP8) where a sequence is split; the occupancy, which the tables do not give, is fitted on a grid
  (`blocks_per_sm`: 2 for the bf16 cache, 1 for FP8). Under CUDA graphs FlashInfer runs its partition-kv kernel
  even unsplit, but the rows show no step below 129 tokens, so only a split call pays the merge. Decode MAPE
  (before -> after): RTX PRO 6000 SGLang bf16 10.9 -> 8.4%, FP8 9.6 -> 7.3% (fitted on); vLLM's FlashInfer FP8-KV
  rows (the check, not fitted on) 13.6 -> 13.0%; L40S (held out) SGLang bf16 12.4 -> 9.2%, FP8 10.3 -> 7.9%, vLLM
  FP8 11.3 -> 10.3%.
* The KV stream may pass memory_max (stop 47). Every decode family's stream efficiency had been capped at 1 of the
  preset's streaming rate, the DRAM peak x memory_max (0.85 on every in-sample GPU, AttAcc's generic figure), and
  sat on the cap; FlashAttention-3 on the H100 streams caches of >= 1 GB at 0.90 of the HBM3 peak (median; 0.95
  at most), so every H100 FA3 row past ~1K tokens read 9-12% slow. The cap is now the DRAM peak itself
  (efficiency <= 1 / memory_max; fit_kernels._peak_over_stream), and a call never streams above the tier's peak
  (Decode.memory_s; the h200 preset's memory_max is 1.0 over its measured 4.13 TB/s, so nothing passes that).
  Decode MAPE (before -> after): H100 bf16 SGLang 12.0 -> 9.7%, vLLM 9.8 -> 8.1%, TensorRT-LLM 13.7 -> 13.4%; FP8
  SGLang 7.1 -> 7.1%, vLLM 6.8 -> 7.4%, TensorRT-LLM 14.8 -> 14.9%; RTX PRO 6000 vLLM bf16 13.3 -> 12.5%; L40S (held
  out) vLLM bf16 14.6 -> 14.3%, FP8 10.3 -> 10.9%. The faster H100 attention moved the coupled serving fits
  (docs/energy.md): vLLM step_s 682.1 -> 851.5 us, SGLang per_seq_s 6.77 -> 11.07 us, TensorRT-LLM per_seq_s
  7.11 -> 8.58 us; the silicon sample's held-out TTFT / TPOT / E2E 24.2 / 7.4 / 7.3 -> 24.1 / 7.3 / 7.2%. The
  LLMServingSim RTX PRO 6000 case moves back out of its TTFT band (-19.0 -> -21.5%; TPOT -9.3%, throughput +8.6%),
  the RTX 4090 case +11.5 -> +10.9% (TPOT +7.9%, throughput -7.9%).
* FlashAttention-3 on SM 8.x, and vLLM's own FlashInfer decode (stop 48). SGLang's A100 rows (kernel_source
  flash_attention) are its `fa3` backend, which SGLang allows on SM 8.x for non-MLA models (python/sglang/srt/
  layers/attention/attention_registry.py create_flashattention_v3_backend): FlashAttention-3's code base built for
  SM 8.0, not FA2. A decode call there is varlen, and FA3 splits it in two steps (Dao-AILab/flash-attention
  hopper/flash_api.cpp get_num_splits, heuristics.h num_splits_heuristic, flash_prepare_scheduler.cu): a bound
  from the wave efficiency over the KV heads as if the batch were one sequence (no split at <= 4 key blocks), then
  per sequence its key blocks over the blocks each SM should take (batch x blocks x 1.1 x KV heads / SMs), MHA and
  grouped-query calls alike (hw_models/stack/fa3_splits.py, `split: fa3`). Under FA2's rules (MHA never split)
  the MHA rows at batch 1-8 and >= 2K tokens had read 40-670% slow; the family `sglang_fa3_sm80`, fitted on
  these rows (the only in-sample SM 8.0 GPU: none held out), streams large caches at 0.81 of memory_max (0.69 of
  the peak: one-token pages), where the rows at batch >= 16 and >= 512 tokens had read 30-50% fast. Fitted with
  no split 15.5%, FA2's 13.2%, FA3's 11.7%; with FA3's per-CTA cost counted per (sequence, KV head), its split CTAs
  sharing one packed query tile (Decode.cta_units), 11.6%, and a longer cache that splits fewer ways no longer costs
  less (counted per split CTA, RTX PRO 6000 batch 1 at 2,560 tokens read 3% under 2,048). A100 SGLang decode bf16
  17.8 -> 11.6%. Left: a step at 512 tokens
  (FA3's split kernel takes over from 5 key blocks, whatever the per-sequence count; charging its CTAs apart
  gained 0.2 points, not kept; a reading of the source, not measured apart), and small caches at batch >= 256
  read 20-27% fast. vLLM's FlashInfer FP8-KV decode
  rows had taken SGLang's FlashInfer figures (`decode_from`, read at 13.0%): they cost 2.5 us more at small
  caches and run at another occupancy (blocks_per_sm 1), through the plan vLLM's backend makes itself; fitted on
  vLLM's own RTX PRO 6000 rows (`vllm_flashinfer` decode, `decode_from` retired), 13.0 -> 7.1% in sample and
  10.9 -> 8.1% on the L40S, held out.
* TensorRT-LLM's multi-block merge (stop 48). TensorRT-LLM decodes in multi-block mode by default: a sequence with
  a history of 256 tokens or more is cut into sub-sequences (history // 128, at most round(sqrt(8 n)), cut back
  where the call passes 8 waves; cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/decoderXQAImplCommon.h
  computeMultiBlockCount, kMinHistoryTokensPerBlock 128, kTargetWaveFactor 8), whose partials the kernel merges
  through a scratch buffer zeroed before each call. Every GPU's rows step up between 256 and 512 tokens at small
  batches (H100 4/1 heads, batch 1: 11.3 us at 256 tokens, 15.1 us at 512), where sim had read 15-40% fast.
  `split: xqa` (hw_models/stack/xqa_splits.py, hand-derived test) prices the merge (`combine_s`, fitted: 3.67 us
  bf16, 2.21 us FP8) where the count passes 1, and keeps one CTA per (sequence, KV head) for the CTA terms: counting
  the sub-sequences there read worse (bf16 14.4%, as stop 47 found for the whole count). The walk families
  (trtllm_attention_sm120, _sm89) take it for the 16-bit cache only (their FP8-KV grouped calls walk unsplit;
  with it their FP8 rows read 10.5 / 16.5% against 9.4 / 15.5%). Decode MAPE (before -> after): H100 bf16 13.4 ->
  11.7%, FP8 14.9 -> 13.2%; A100 bf16 22.1 -> 20.6% (its grouped rows that read less than they name stay in the
  table); RTX PRO 6000 bf16 11.8 -> 9.5%; L40S bf16 10.6 -> 8.4%. Held out by GPU (`--hold-out`): H100 12.4%, A100
  17.7%, RTX PRO 6000 16.5% (without the merge 14.1 / 18.5 / 20.3%). The serving fits were redone (docs/serving.md:
  TensorRT-LLM step_s 496.2 -> 392.5 us). Second, TensorRT-LLM's MHA calls (heads == KV heads) run masked MHA, not
  XQA, and with an FP8 cache that kernel costs more per call: the H100 FP8-KV MHA rows at batch 1-16 and small
  caches read 30-44% fast (8/8 heads, batch 1: 9.0 us measured against 6.1). `mha_fixed_s`, the MHA kernel's fixed
  cost beyond `fixed_s`, is fitted where it lowers the in-sample MAPE (families with `mha_kernel`; fit_kernels
  tries both): H100 FP8 3.06 us (decode 13.2 -> 10.9%), L40S FP8 8.15 us (15.5 -> 13.5%); not kept for any 16-bit
  cache nor the RTX PRO 6000's FP8 (9.4 -> 10.0% with it). The L40S FP8 context rows at one prompt token, which the
  tables cost as a decode call, read worse with it (their 224 rows 36.6 -> 54.1%; the 2,700 others 8.2%, unmoved):
  L40S FP8 prefill 9.9 -> 11.8%.
* One-token context calls (stop 48). A ctx_attn row of one prompt token was priced as a decode call (the cost
  model decided by q_len alone), while scripts/fit_kernels.py fits the prefill curves on those rows with the prefill
  model (rate points from q_len 1). TensorRT-LLM's attention op sends context requests to its context FMHA and
  generation requests to XQA / masked MHA (attentionOp enqueueContext / enqueueGeneration), so its families
  (`context_kernel: true`) now price a prefill step's one-token call by the prefill curve; vLLM's and SGLang's
  FlashAttention run one varlen kernel for both, so theirs keep the decode figures (priced by the curve too, their
  one-token rows read worse: vLLM H100 bf16 prefill 8.6 -> 9.3%). The lowering marks a prefill step's attention
  (`context`). TensorRT-LLM prefill MAPE: H100 bf16 9.4 -> 7.2%, FP8 10.9 -> 7.2%; RTX PRO 6000 10.1 -> 6.9%,
  8.7 -> 6.4%; L40S 8.3 -> 6.8%, 11.8 -> 8.1% (its one-token rows had read 27-67%). Serving iterations are
  unchanged (sim.core.mixed.lower_iteration groups one-token sequences with the decodes, unmarked); `sim run`'s
  prefill of a one-token prompt under the trtllm stack moves.
* FlashInfer: a family of its own (decode and prefill), fitted on SGLang's RTX PRO 6000 rows alone (the L40S's
  SGLang rows, which run it too, are costed with it held out: decode bf16 18.2%); vLLM's
  FlashInfer FP8-KV decode rows of that GPU are the check (not fitted on: 31.2% -> 13.6% with the fitted L2 rate). The
  stacks pick their backend as the engines' source does, by the GPU's `compute_capability` and the KV format:
  SGLang fa3 on Hopper, trtllm_mha on SM 10.x, FlashInfer elsewhere (server_args.py _get_default_attn_backend);
  vLLM FlashInfer on SM 10.x and for FP8 KV off Hopper (platforms/cuda.py _get_backend_priorities; FA2 reads no
  FP8 KV). A row is costed with the family of the kernel it measured (SGLang 0.5.10's A100 rows ran
  flash_attention).
* Prefill attention: fixed + FLOPs at a fraction of the bf16 peak per sequence length + kv_len x a walk per key
  (the critical path: the last query tile of a sequence walks all its keys, so a call of few CTAs cannot be
  faster; Graham's bound), the fraction a power law between fitted lengths. Fitted by NNLS on the relative error
  (1 / fraction as 1 + non-negative steps: it never falls with the length nor passes the bf16 peak), then, where a
  step would make a longer sequence faster inside a segment, least squares under that cap. Curves per compute
  capability (`prefill_sm`: SM 8.0 / 8.9 / 9.0 / 12.0, each fitted on its one in-sample GPU, the L40S's ctx_attn
  rows included); another GPU takes the family's curves pooled on H100, A100 and RTX PRO 6000. vLLM's FlashInfer
  FP8-KV rows are a family of their own (`vllm_flashinfer`); SGLang's A100
  flash_attention rows take sglang_fa3's SM 8.0 curve (through sglang_fa3_sm80's prefill_from). In sample (bf16 KV, SGLang / TensorRT-LLM / vLLM, before
  -> after): A100 19.8 / 8.3 / 12.9 -> 9.7 / 5.5 / 8.9%, H100 8.1 / 14.5 / 15.4 -> 8.1 / 9.3 / 8.6%, RTX PRO 6000
  18.0 / 14.8 / 16.5 -> 12.6 / 13.5 / 9.6%, L40S 26.1 / 37.0 / 25.5 -> 19.9 / 21.6 / 14.8%. A per-architecture
  curve has no held-out figure (one GPU each); the pooled curves held out by GPU (bf16 KV): TensorRT-LLM H100
  15.9%, A100 11.8%, RTX PRO 6000 16.6%; FlashAttention H100 21.1%, A100 15.3%, RTX PRO 6000 23.6%; SGLang's
  FlashAttention H100 28.2%, A100 21.3% (scripts/fit_kernels.py fit_prefill with hold_out).
* FP8-KV prefill: one curve per (query, KV) dtype pair the rows name (`prefill_kv`, `prefill_fp8_query`;
  sim.apps.trace.aic lowers a row's attn_dtype as the activations' format). The engines run three paths: at
  >= 3K tokens TensorRT-LLM's FP8-query rows take 0.51-0.55x the bf16 rows' time on RTX PRO 6000 and L40S and
  0.65-0.72x on H100 (FP8 FMHA math), its bf16-query FP8-KV rows 1.00x on RTX PRO 6000 (the cache converted,
  bf16 math) but 0.65-0.8x on H100; vLLM's FA3 FP8-KV rows on H100 1.05-1.25x; SGLang's fa3 rows on H100 are
  FP8-query. Pooling the two TensorRT-LLM row kinds (an earlier attempt) fitted 28.9-29.4%. In sample (before
  -> after): H100 SGLang / TensorRT-LLM / vLLM 13.3 / 30.6 / 26.6 -> 9.1 / 23.2 / 12.0%, RTX PRO 6000 21.1 / 32.5
  / 35.8 -> 16.8 / 13.1 / 27.8% (vLLM's fiprefill rows then costed with the FlashInfer family fitted on SGLang's
  rows); L40S 23.4 / 55.6 / 36.0 -> 22.8 / 37.2 / 29.4%. With the per-architecture curves above: H100 8.9 / 11.0 /
  11.3%, RTX PRO 6000 11.5 / 11.6 / 10.0%, L40S 16.9 / 20.6 / 12.2% (now in sample). Held out by
  GPU, the TensorRT-LLM FP8-query curve fitted on H100 alone costs the RTX PRO 6000 rows at 67.0% (bf16-query
  FP8-KV 38.1%): SM 12.x gains more from FP8 math than Hopper, so the shipped SM 12.x family keeps its own
  curves (fitted on that GPU only: no held-out figure for it).
* The attention call's other kernels under the replay (stop 44): a replayed call re-reads the same buffers, so
  the RoPE and KV-write kernels' traffic, where it fits the L2, streams at the unit's L2 rate
  (hw_models.stack.cost.replay_l2_s; only GPUs whose preset gives an L2 rate, L40S and RTX PRO 6000, both
  ASSUMED figures). The L40S's TensorRT-LLM bf16 rows of 128 tokens take 34.9 us for the whole call (median of
  112) where those kernels alone cost 42.8 us at the DRAM rate, so the SM 8.9 fit had pinned every length past 32
  tokens to one fraction (0.428). Refitted (scripts/fit_kernels.py --write), in sample, bf16 KV SGLang /
  TensorRT-LLM / vLLM: L40S 19.9 / 21.6 / 14.8 -> 13.6 / 8.1 / 9.8% (8.2% for TensorRT-LLM after trtllm_attention_sm89 below), RTX PRO 6000 12.6 / 13.5 / 9.6 -> 10.5 / 10.1
  / 8.1%; FP8 KV L40S 16.9 / 20.6 / 12.2 -> 15.6 / 10.5 / 13.4% (TensorRT-LLM 9.9% after it), RTX PRO 6000 11.5 / 11.6 / 10.0 -> 11.7 / 8.7 /
  11.4%. Held out by GPU (pooled curves): RTX PRO 6000 TensorRT-LLM bf16 16.6 -> 16.4%, FP8 KV 40.3 -> 33.5%,
  FP8 query 68.5 -> 55.1%, FlashAttention 23.6 -> 17.8%; A100 TensorRT-LLM 11.8 -> 16.0% (worse: the pooled
  curve now follows the RTX PRO 6000 rows' faster short prompts), FlashAttention 15.3 -> 13.1%. The pooled decode
  families move a little (L40S TensorRT-LLM bf16 14.9 -> 11.8%, FP8 46.0 -> 49.7%); serving, which never
  replays, moves only through them (two H100 golden cases, < 0.1%).
* Quantized GEMMs (hw_models/stack/kernel_families_fitted.yaml, fitted by scripts/fit_kernels.py on these
  tables: in sample): per-tensor FP8 as the engines run it, an activation-quantize kernel (fitted on the quant
  tables) then the scaled GEMM with its floor and M-curve, one family per engine (TensorRT-LLM cuBLASLt, vLLM
  CUTLASS); TensorRT-LLM's weight-only INT4 / INT8 plugin (A100); native NVFP4 per engine on RTX PRO 6000 (the
  vllm stack now runs FP4 natively where the GPU has an FP4 rate, Marlin emulation elsewhere). "Before" costs
  them with the hand families the stacks named before (fp8_scaled_mm, fitted on the H200; marlin's figures for
  TRT-LLM weight-only; blackwell_block_scaled; vLLM's FP4 as Marlin emulation). B200 uses the NVFP4 fractions
  fitted on RTX PRO 6000, unfitted there (its tables are held out).
* Serial K-walk (`k_walk_s_per_k`, hw_models/stack/kernel_families.py): a family's memory term is at least K x its
  fitted walk. At small M the RTX PRO 6000 NVFP4 rows of all three engines grow linearly in K and stay flat in N
  far above the weight stream (M = 1, N = 512: 6 us at K = 512, 62 us at K = 16384 for 4 MB of weights); fitted
  per engine the walk is 3.3-3.6 ns per K (TensorRT-LLM NVFP4 25.8% -> 13.8%, vLLM 22.9% -> 9.1%). Kept where it
  lowers the fit and, for a family fitted on two GPUs, each held-out GPU's MAPE: TensorRT-LLM per-tensor FP8 held
  out H100 18.0% -> 17.6%, RTX PRO 6000 15.0% -> 14.9%; across engines on H100, vLLM's family on SGLang's rows
  12.6% -> 12.0% and SGLang's on vLLM's 17.2% -> 16.2%. Not for block-scaled FP8 (TensorRT-LLM held out H100
  15.9% -> 31%). The weight-only INT4 / INT8 plugin: 13.7% -> 11.6%, 11.8% -> 10.5%.
* Per architecture: sgl-kernel's fp8_scaled_mm and vLLM's cutlass_scaled_mm build a single CUTLASS configuration
  on SM 12.x (sgl-kernel csrc/gemm/fp8_gemm_kernel.cu: CTA 128x128x128, cluster 1x1x1, no tile scheduler; vLLM
  c3x/scaled_mm_sm120_fp8_dispatch.cuh: 256x128x64) and M-dispatched ones on SM 9.0, so the stacks name a family
  per compute capability (`quant_gemm_by_capability`), each fitted on its architecture's GPU only (no GPU left
  to hold out): SGLang FP8 RTX PRO 6000 33.6% -> 7.7% (a walk of 6.8 ns per K, 4.6x vLLM's there), H100 14.4% ->
  12.1%; vLLM FP8 H100 18.4% -> 14.3%, RTX PRO 6000 16.6% -> 13.5%. Across engines on H100 (vLLM's and SGLang's
  SM 9.0 kernels are the same CUTLASS port) the walk helps the engine not fitted on: vLLM's family on SGLang's
  rows 12.6% -> 12.0%, SGLang's on vLLM's 17.2% -> 16.2%.
* Dynamic activation scale (`quant_row_s`): vLLM's per-tensor FP8 computes its activation scale per call with one
  thread block per token, each an atomicMax into one float (ops.scaled_fp8_quant(x, None) ->
  csrc/quantization/fp8/common.cu segmented_max_reduction, grid = num_tokens), so the call grows with M at a
  fixed time per row (M = 8192, N = K = 512: vLLM 68 us, TensorRT-LLM with a static scale 23 us). The pass is
  charged max(re-reading x, M x quant_row_s), the time per row fitted on a grid: 7 ns on H100 (14.3% -> 8.9%),
  4 ns on RTX PRO 6000 (13.5% -> 11.4%); the large-M fraction of the FP8 peak rises to 0.69-0.74 (TensorRT-LLM's
  0.68). SGLang's dynamic per-token quantize (sglang_per_token_quant_fp8, one block per row): 1 ns on H100
  (12.1% -> 10.5%), none on RTX PRO 6000. SGLang's NVFP4 rows have their own family
  (SGLang's quantize, then FlashInfer's CUTLASS GEMM): 29.2% -> 9.9% (vLLM's family on them: 17%).
* Block-scaled FP8 (DeepSeek-V3 128x128 tiles): its own format `fp8_block128` (one fp32 scale per tile, exact
  bytes) and a family per engine (TensorRT-LLM's fp8_block_scaling_gemm; vLLM's FlashInfer block-scale GEMM at
  small M and DeepGEMM above), fitted on the fp8_block rows (H100 and RTX PRO 6000 for TensorRT-LLM; H100 only for
  vLLM), and SGLang's DeepGEMM (~11 us at M = 1, where vLLM's FlashInfer path takes ~60 us; the sglang stack names
  it, fitted on the gemm_sglang H100 rows). TensorRT-LLM's, fitted on both GPUs pooled, held out by GPU:
  fitted on H100, RTX PRO 6000 27.5%; fitted on RTX PRO 6000, H100 15.9%; its kernel is picked by SM version
  (cpp/tensorrt_llm/thop/fp8BlockScalingGemm.cpp), so it is now a family per architecture with its own K-walk
  (1.1 / 3.0 ns per K): H100 12.4% -> 8.7%, RTX PRO 6000 25.7% -> 19.2%. On RTX PRO 6000 its calls also grow with
  M at a fixed time per row far over the activations' stream: the dynamic-scale pass's form (`quant_row_s`,
  22 ns per row fitted; which kernel pays it the rows do not say): 17.8% -> 9.6%.
* Kernel switch by M (`switch_m` / `switch_family`): vLLM's block-scaled FP8 on Hopper runs FlashInfer's swapAB
  kernel below M = 32 and DeepGEMM from 32 (fp8_utils.py _flashinfer_fp8_blockscale_gemm_impl, torch.cond on
  M < 32; the H100 rows name flashinfer_fp8_block at M 1-16, deepgemm_fp8_block at 32-8192): two families, each
  fitted on its kernel's rows (vllm_fp8_block, vllm_fp8_block_deepgemm; no row at M 17-31, where FlashInfer's
  compute time is held at M = 16's). Least call time (`min_s`): no call of either kernel, nor of vLLM's Triton
  block-scaled kernel on L40S, takes less than a fixed time at any shape (FlashInfer ~56-60 us, DeepGEMM ~78-90
  us, Triton ~285-340 us; the work hides under it: max(min_s, floor + work), floor 0 as no memory-bound row shows
  one beneath it; min_s chosen on a grid of the rows' time quantiles): H100 vLLM block-scaled 19.6% -> 5.8%
  (FlashInfer rows 3.5%, DeepGEMM rows 7.0%), L40S 13.6% -> 6.2%. That fixed time is the host's: the collector
  times these rows, and only these, without a CUDA graph (collector/vllm/collect_gemm.py, `use_cuda_graph=
  gemm_type != "fp8_block"`), so min_s is an eager call's dispatch; the per-op replay marks them so
  (sim.apps.trace.aic EAGER_TIMED), and a graph-replayed call costs as the family's `graph_family`, SGLang's
  graph-timed DeepGEMM rows (stop 76; docs/serving.md, "MiniMax-M2.5 under vLLM").
* SmoothQuant (`sq`, A100): W8A8 int8 with the activations quantized upstream; aiconfigurator's collector times
  the SmoothQuantGemm plugin layer alone (collector/trtllm/collect_gemm.py, TensorRT's per-layer profiler), so
  the row is costed with int8 activations under the stack's `quant_gemm_w8a8` family, no quantize kernel. The
  plugin runs a CUDA-core kernel at M <= 4 and CUTLASS above (smoothQuantGemmPlugin.cpp enqueue): two families
  (trtllm_w8a8_sq, trtllm_w8a8_sq_cutlass, the second with a K-walk), fitted on the A100 rows (the smallest
  calls step from ~9 us at M 1-4 to ~20 us at M 8): 38.1% (as weight-only INT8) -> 10.6%.
* Not done: TensorRT-LLM's per-tensor FP8 (cuBLASLt, closed source: no per-architecture kernel choice to cite)
  stays one family on both GPUs: 11.1% / 13.0% in sample, held out by GPU H100 17.6%, RTX PRO 6000 14.9%; on
  L40S (held out for it) 16.1%, and vLLM's SM 8.9 family 16.5% in sample: their errors scatter by shape (vLLM's
  mean error within +-4% at every M >= 1024, MAPE 19-25% there), which an M-curve does not see: at M = 2048,
  K = 512 vLLM's rows take 139-223 us for N 5120-8192 but 163 us for N 10240 (sim -57 to -65% on the first,
  +37% at N 512), grouped by N's power of two as c2x/scaled_mm_sm89_fp8_dispatch.cuh picks its tile by N within
  each M bucket; not modelled (a family per tile would be chosen on these rows). The
  single-GPU families (each fitted on its architecture's only in-sample GPU) have no held-out figure. MXFP4 and
  vLLM's Marlin W4A16 have no rows in these tables (MXFP4 keeps its hand families).
* L40S (Ada, SM 8.9; preset `l40s` from its datasheet, node `l40s_x8_pcie`): its rows feed only its own fits
  (scripts/fit_kernels_ada.py), so the pooled families and graph_gap_s keep the other GPUs' figures: NCCL and custom
  all-reduce lines on its PCIe node (NCCL all_reduce 139% -> 7.7%; its 4- and 8-GPU rows reach only 1-5 GB/s of bus
  bandwidth), `dense_bf16_l40s` (bf16 GEMM, datasheet roofline with the graph gap -> fitted: vLLM 28.1 -> 18.5%,
  SGLang 30.5 -> 19.9%, TensorRT-LLM 40.5 -> 29.3%; pooled over the other three GPUs and held out, 30.7%), and SM 8.9
  FP8 families the stacks name by capability 8.9 (A100's 8.0 is untouched): vLLM per-tensor 25.9 -> 22.9%, SGLang
  36.3 -> 24.4%, TensorRT-LLM block-scaled 38.5 -> 22.9%, vLLM block-scaled (Triton, ~300 us a call at any shape)
  65.9 -> 13.3%. TensorRT-LLM per-tensor FP8 stays the pooled cuBLASLt family, so L40S is its held-out GPU (22.6%).
  Decode attention is not fitted on L40S: the pooled families cost its rows out of sample (decode bf16 18-20%,
  TensorRT-LLM FP8 KV decode 40%); its prefill rows fit the SM 8.9 curves (prefill bullet). Missed: SGLang's custom all-reduce 0.5.12 (264%: its 4- and 8-GPU rows, another machine; collectives bullet). The RTX 4090 (same
  SM and clock) was given `dense_bf16_l40s` under a rule stated before measuring (rtx4090.yaml): its vLLM serving run
  went +11.5 / +8.5 / +10.8 / -8.2% -> +129 / +110 / +124 / -51% (TTFT / TPOT / E2E / throughput), so it keeps the
  roofline; the small-M rate fractions are not tensor-bound and do not scale with the GeForce half-rate peak."""


def aic_section(shared: Path, table_fn=table) -> tuple[str, dict]:
    paths = _tables(shared)
    if not paths:
        return "", {}
    after = validate_tables(paths)
    before = validate_tables(paths, baseline=True)
    b, a = before.mape_by_family(), after.mape_by_family()
    figures = {f"aic.{gpu}.{fam}.{k}": v[1] for k, by in (("before", b), ("after", a)) for (gpu, fam), v in by.items()}
    parts = []
    for held, title in ((False, "In sample (fitted on by scripts/fit_kernels.py)"),
                        (True, "Held out (never fitted on: report only)")):
        keys = [k for k in a if (k[0] in HELD_OUT) == held]
        if not keys:
            parts.append(f"### {title}\n\nNo such table in shared/validation/aic.\n")
            continue
        rows = [[gpu, fam, str(a[gpu, fam][0]), pct(b[gpu, fam][1]) if (gpu, fam) in b else "-",
                 pct(a[gpu, fam][1])] for gpu, fam in keys]
        parts.append(f"### {title}\n\n" + table_fn(["GPU", "family", "rows", "MAPE before", "MAPE after"], rows) + "\n")
    skipped = "".join(f"- {line}\n" for line in dict.fromkeys(after.skipped))
    text = f"""## aiconfigurator per-op tables (`sim validate --input-format aic`)

{__doc__.split(chr(10) + chr(10), 1)[1].split(chr(10) + chr(10))[0].strip()}
Reproduce: `sim validate --input-format aic ../shared/validation/aic/<table>_<gpu>.csv.gz` (each row under its engine's
stack; `--stack NAME` for one stack on every row).

{chr(10).join(parts)}
{NOTES}

Not costed:

{skipped}"""
    return text, figures


SECTION_END = "\n_Report generated in"   # validation_report.py's last line follows this section


def write_section(text: str, doc: Path = ROOT / "docs" / "validation.md") -> None:
    """Replace docs/validation.md's aic section (from its heading to the report's closing line) with `text`."""
    old = doc.read_text()
    start, end = old.index(text.split("\n", 1)[0]), old.rindex(SECTION_END)
    doc.write_text(old[:start] + text + old[end:])


def main() -> int:
    args = script_args(__doc__, write="splice the section into docs/validation.md")
    shared = shared_validation_dir()
    text, _ = aic_section(shared)
    if text and args.write:   # splice this section alone, without rerunning the whole report
        write_section(text)
        print("wrote the aic section of docs/validation.md")
        return 0
    print(text or f"{shared}/aic not found")
    return 0


if __name__ == "__main__":
    sys.exit(main())
