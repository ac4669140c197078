"""Attention kernel families: how the engines' attention kernels spend time, beyond the roofline.

A decode attention kernel is not only its KV stream: measured through the engines' own
modules (aiconfigurator's tables, shared/validation/aic) it has a fixed cost (several us at
batch 1, whatever the KV length), and a cost per CTA that grows with the sequences in the
batch (hundreds of us at batch 1024 with 1-token caches), and streams the KV cache at a
measured fraction of the bandwidth. Per family and KV format:

    decode  = fixed_s + fixed_cycles / clock + cta_s x CTAs / SMs
              + max(KV bytes / (bandwidth x memory_max x kv_stream_efficiency) x (1 + kv_ramp_ctas / CTAs),
                    kv_len x kv_walk_s_per_token)    (the walk: grouped-query calls, or MHA ones, below)

with CTAs = batch x kv_heads. The fixed cost has a part in seconds (the graph's inter-kernel gaps) and a part in
cycles (on-chip serial work: the kernels' prologues, the RoPE / cache-write kernel, the split-KV combine), which is
why it falls with the SM clock (vLLM's rows: 14.1 / 11.3 / 9.8 us on A100 / H100 / RTX PRO 6000, one line in
1 / clock). The KV stream reaches its rate only with enough CTAs in flight to cover the DRAM latency (Little's law);
split-KV recovers part of it, so the rate rises as CTAs / (CTAs + kv_ramp_ctas) (one CTA streams at ~40% of the
many-CTA rate on H100 and A100).
The efficiency, against memory_max (0.85 in sample), may pass 1 up to the DRAM peak (FA3 on the H100: 0.90-0.95):
the tier's `peak_bandwidth_bytes_per_s` where its bandwidth is a measured rate below the datasheet's (h200), else its bandwidth.

A per-op measurement that replays ONE layer's attention call in a CUDA graph (aiconfigurator's tables)
re-reads a KV cache no larger than the L2 from the L2: those rows stream at the unit's cited L2 read
bandwidth (Unit.l2_bandwidth_bytes_per_s) at the family's fitted `l2_stream_efficiency`, with the same ramp,
instead of DRAM's: RTX PRO 6000 rows of exactly its 128 MiB L2 run at ~2.5 TB/s, 1.4x its DRAM peak, and one of
160 MiB at DRAM speed, and that GPU's cited rate is ASSUMED (23.35 TB/s, scaled from the A100 whitepaper), so
the efficiency (0.12-0.21: 2.9-4.9 TB/s) carries the measured rate, not a kernel's share of a known one. Only a
stack marked `single_layer_replay` (set by sim.apps.trace.aic for those tables, never by a stack file) takes
it: in serving every other layer of the step evicts the cache, so serving streams it from DRAM.

`cta_s` is SM-seconds per CTA (one per sequence and KV head: FlashAttention's and XQA's grids), so the term
follows the GPU's SM count (unit efficiency.parallel_units): ~3-4 us of one SM per CTA for FlashAttention.
TensorRT-LLM runs grouped-query heads through XQA (~5 SM-us per CTA on
H100) and one-KV-head-per-query-head models through masked MHA (~1.4): `mha_cta_s` is the
per-CTA figure where heads == kv_heads, and a family whose MHA calls run another kernel streams them at its
own `mha_kv_stream_efficiency` / `mha_kv_ramp_ctas` (TensorRT-LLM: H100 FP8-KV rows of >= 1 GB stream at 0.73 of
the DRAM peak through masked MHA, 0.90 through XQA; scripts/attn_residuals.py) and pays that kernel's own fixed cost
beyond `fixed_s` (`mha_fixed_s`: TensorRT-LLM's FP8-KV masked MHA, ~3 us more than XQA on H100).

A prefill (causal) attention kernel runs at a fraction of the 16-bit tensor peak that grows with the sequence length:

    prefill = fixed_s + FLOPs / (bf16 peak x fraction(q_len)) + kv_len x walk_s_per_token

with the fraction interpolated as a power law between the fitted lengths (linear in log fraction over log
q_len: FLOPs / fraction then stays a power of q_len inside a segment) and held flat past the ends. Every measured
row is a whole prompt (kv_len = q_len: aic's ctx_attn tables, `step` 0), where the query tiles (the CTAs) and each
tile's walk over the keys grow together. A chunk over a longer cache (a prompt's tail after chunked prefill, a
speculative verify of k + 1 tokens, a prefix-cache hit) reads the fraction at its kv_len: its FLOPs grow with
q_len x kv_len, and the few CTAs of a small q_len are the walk term's critical path, not a lower rate on every FLOP
(read at q_len, a 2-token verify over 1,000 keys cost 798 us a layer against 8.8 us as a decode; stop 60). The
length read is that of the whole prompt with as many causal (query, key) pairs, so as many FLOPs (`chunk_length`:
~sqrt(2 q_len kv_len) for a few queries, q_len on every measured row): the time then stays as monotone in q_len and
in kv_len as the curve is in its length (read at kv_len alone, a longer cache over a few queries could take less). The last
term is the critical path: a causal kernel's CTAs are (sequence, head, query tile) and the last query tile of a
sequence walks all kv_len keys, so the call lasts at least that walk, on top of the work spread over the SMs
(Graham's list-scheduling bound: makespan <= work / SMs + the longest task). It is what makes a call of few
CTAs slow: on H100 vLLM's 1-sequence, 4-head rows at 4K tokens run at 0.23-0.27 of the bf16 peak where 8 heads
reach 0.36-0.50 (ctx_attn_h100). For a ragged batch the mean kv_len stands for the walk.

with one curve per (query, KV) dtype pair the engines run apart (ctx_attn rows, issue 28; docs/validation.md):
`prefill` (16-bit KV), `prefill_kv` (an FP8 cache, 16-bit query) and `prefill_fp8_query` (FP8 query on an FP8 cache:
FP8 tensor-core math, e.g. TensorRT-LLM's FP8 context FMHA). Each falls back to `prefill`. The fraction stays one of
the bf16 peak, so an FP8-math curve may reach up to twice the bf16 curve's.
The curves are per architecture: a family's `prefill_sm` holds, per compute capability (8.0, 8.9, 9.0, 12.0: one
in-sample GPU each), the curves fitted on that GPU's rows alone (the kernels differ: FlashAttention-3 on Hopper,
FA2 elsewhere, FlashInfer's SM 8.9 and 12.0 builds); a GPU of another capability takes the family's own curves,
fitted on the H100, A100 and RTX PRO 6000 rows pooled. A family may take every prefill curve from another
(`prefill_from`): flash_attn2 differs from flash_attn in decode only, and flash_attn's curves are per architecture
already; sglang_fa3_sm80 (FA3's SM 8.x build under SGLang) takes sglang_fa3's, whose SM 8.0 curve is its own.
The tables' attn_dtype is aiconfigurator's collector flag (`"fp8" if use_fp8_context_fmha`); TensorRT-LLM's
`use_fp8_context_fmha` runs the context FMHA in FP8 and is meant for FP8-quantized models (TensorRT-LLM docs,
performance/perf-best-practices.md, "FP8 Context Fused Multi-Head Attention"), which is why a serving step
picks `prefill_fp8_query` only where the activations are FP8 too.

Where a kernel runs one CTA per (sequence, KV head) over the whole cache, without splitting the sequence
across CTAs (TensorRT-LLM's XQA multi_block_mode splits it; its SM 12.x FP8-KV grouped-query rows show no
split), the call takes at least kv_len x `kv_walk_s_per_token` whatever the batch and KV heads up to one wave:
the RTX PRO 6000 rows take 85 / 320 / 1260 us at 8K / 32K / 128K tokens for batch 1-8 and 1-8 KV heads alike
(~9.6 ns, 25 SM cycles, per token), where the bf16-KV rows of the same GPU and the H100's FP8 rows take 31-40 us
at 128K. The KV term is the larger of the stream and that walk (for a ragged batch, at the mean kv_len).

FlashAttention-2 (vLLM off SM 9.0: `flash_attn2`) splits the sequence only for grouped-query decode, where the
query heads of a KV head become rows of one tile (vllm-project/flash-attention csrc/flash_attn/flash_api.cpp
mha_varlen_fwd: seqlenq_ngroups_swapped). An MHA decode call therefore walks each (sequence, head)'s whole cache in
one CTA (`mha_kv_walk_s_per_token`: the A100 rows take 3.0 ms at 128K tokens for 1-4 sequences of 4-8 heads
alike), and a grouped-query call is split the way num_splits_heuristic chooses (`split: fa2`, fa2_splits.py): its
CTAs are batch x kv_heads x splits, for the per-CTA cost and the stream's ramp, and a split call pays `combine_s`
for the kernel that merges the partial results. FlashInfer (`split: flashinfer`, flashinfer_splits.py) splits MHA
and grouped-query calls alike, into chunks of at least 128 tokens, as many as its grid has room for.
FlashAttention-3's SM 8.x build (`split: fa3`, fa3_splits.py) splits both kinds too, by a bound over the KV heads and
a per-sequence count; its split CTAs share one packed query tile, so its per-CTA cost counts (sequence, KV head)
pairs (Decode.cta_units). TensorRT-LLM's multi-block mode (`split: xqa`, xqa_splits.py) pays its merge where a
sequence is cut, but its CTAs stay one per (sequence, KV head): counted with the sub-sequences, the rows read worse.
For a ragged batch the mean kv_len stands for FA2's max_seqlen_k.

PyTorch's SDPA on SM 9.0 (torch 2.11: cuDNN's fused flash kernel, `split: cudnn`) adds a reduction kernel where
the (sequence, KV head) pairs split in two still fit the SMs and the cache holds >= CUDNN_SPLIT_MIN_KV tokens; how
many ways it splits is not seen, only the merge (`combine_s`) is priced.

The figures are fitted by scripts/fit_kernels.py on the in-sample GPUs' tables and written to
attention_kernels.yaml (do not edit it by hand); the families fitted on this project's own measurements
(`torch_cudnn_sdpa`: scripts/fit_torch_attention.py on the H200's SDPA sweep) live in attention_kernels_torch.yaml.
A stack names its family (`attention:`, or by GPU and KV format in `attention_rules:`).
Without parallel_units (or clock_hz, where the family has cycles) the decode terms cannot be
placed: the op keeps the roofline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from hw_models.op_cost import OpCost, bound_of
from hw_models.compute_path import native_rates
from hw_models.machine import Tier, Unit
from hw_models.stack.fa2_splits import fa2_num_splits
from hw_models.stack.fa3_splits import fa3_num_splits
from hw_models.stack.flashinfer_splits import flashinfer_chunks
from hw_models.stack.kernel_families import read_family_files
from hw_models.stack.prefill_curves import (Prefill, PrefillCurves, chunk_length, format_keys, kernel_format,
                                            same_kernels_refused)
from hw_models.stack.xqa_splits import xqa_multi_block_count
from sim.core import graph as g
from sim.core.errors import ConfigError
from sim.core.formats import get_format
from sim.core.graph import Op
from sim.core.schema import Quantity, Strict

KERNELS_FILE = Path(__file__).parent / "attention_kernels.yaml"
MEASURED_FILE = Path(__file__).parent / "attention_kernels_torch.yaml"   # scripts/fit_torch_attention.py
# cuDNN's fused SDPA (PyTorch 2.11 on SM 9.0) splits a decode call's KV, adding a reduction kernel, where the batch's
# (sequence, KV head) pairs split in two still fit the SMs and the cache holds at least this many tokens: so on every
# point of the H200 sweep and every flash capture of traces/h200 (split at 8, 32 and 64 pairs from 1024 tokens on, never
# at 128 or more pairs, never at 256 tokens; kernels.json, *_flash.trace.json.gz).
CUDNN_SPLIT_MIN_KV = 1024


def cudnn_splits(batch: int, kv_heads: int, sms: int, kv_len: int) -> bool:
    """Whether cuDNN's SDPA splits a decode call's KV (CUDNN_SPLIT_MIN_KV's note)."""
    return 2 * batch * kv_heads <= sms and kv_len >= CUDNN_SPLIT_MIN_KV


class Decode(Strict):
    fixed_s: Quantity = Field(ge=0)
    fixed_cycles: float = Field(default=0.0, ge=0)      # SM clock cycles of the fixed cost (needs clock_hz)
    cta_s: Quantity = Field(ge=0)                       # SM-seconds per (sequence, KV head) CTA, grouped queries
    mha_cta_s: Quantity = Field(ge=0)                   # the same where every query head has its own KV head
    kv_stream_efficiency: float = Field(gt=0, le=1.5)   # x the unit's memory_max, with many CTAs in flight
    kv_ramp_ctas: float = Field(default=0.0, ge=0)      # CTAs at which the KV stream reaches half that rate
    # The same two where heads == kv_heads, for a family that runs those through another kernel (module doc:
    # TensorRT-LLM's masked MHA against XQA); None: the grouped-query figures.
    mha_kv_stream_efficiency: float | None = Field(default=None, gt=0, le=1.5)
    mha_kv_ramp_ctas: float | None = Field(default=None, ge=0)
    mha_fixed_s: Quantity = Field(default=0.0, ge=0)   # that kernel's fixed cost beyond fixed_s (TensorRT-LLM FP8 KV)
    l2_stream_efficiency: float = Field(default=1.0, gt=0, le=1.0)   # x the unit's cited L2 read rate (replay)
    kv_walk_s_per_token: Quantity = Field(default=0.0, ge=0)   # grouped-query KV term >= kv_len x this (module doc)
    mha_kv_walk_s_per_token: Quantity = Field(default=0.0, ge=0)   # the same for MHA calls (FlashAttention-2)
    # How the kernel splits a sequence across CTAs (module doc): "none", FlashAttention-2's heuristic ("fa2",
    # grouped-query calls only), FlashAttention-3's on SM 8.x ("fa3"), FlashInfer's partition-kv ("flashinfer", with
    # the fitted occupancy `blocks_per_sm`), TensorRT-LLM's multi-block mode ("xqa"), cuDNN's SDPA ("cudnn", CUDNN_SPLIT_MIN_KV); a split call pays `combine_s`
    # for merging the partials.
    split: Literal["none", "fa2", "fa3", "flashinfer", "xqa", "cudnn"] = "none"
    combine_s: Quantity = Field(default=0.0, ge=0)
    blocks_per_sm: int = Field(default=1, ge=1)
    rows: int = 0                                       # measured rows fitted
    fit_mape: float = 0.0                               # in-sample MAPE of the whole call

    def launch(self, batch: int, heads: int, kv_heads: int, sms: int, kv_len: int = 1,
               head_dim: int = 128) -> tuple[int, int, bool]:
        """(CTAs, pieces each sequence is split into, whether the MHA kernel runs it) of the call as the family's
        kernel launches it. Unsplit: one CTA per (sequence, KV head), the MHA kernel where heads == kv_heads. The CTAs
        are those the stream's ramp counts: XQA's sub-sequences are not (module doc)."""
        n = 1
        if self.split == "flashinfer":
            n = flashinfer_chunks(batch, kv_heads, sms, kv_len, self.blocks_per_sm)
        elif self.split == "fa2" and heads != kv_heads:
            n = fa2_num_splits(batch * kv_heads * -(-(heads // kv_heads) // 64), sms, kv_len, head_dim)
        elif self.split == "fa3":
            n = fa3_num_splits(batch, kv_heads, sms, kv_len, head_dim)
        elif self.split == "cudnn" and cudnn_splits(batch, kv_heads, sms, kv_len):
            n = 2   # cuDNN's SDPA adds its lean_reduction kernel; how many ways it splits is not seen (CUDNN_SPLIT_MIN_KV)
        elif self.split == "xqa":   # the merge priced, its sub-sequence CTAs not counted (module doc)
            return batch * kv_heads, xqa_multi_block_count(batch, kv_heads, sms, kv_len), heads == kv_heads
        return batch * kv_heads * n, n, heads == kv_heads

    def overhead_s(self, batch: int, heads: int, kv_heads: int, sms: int, clock_hz: float | None = None,
                   kv_len: int = 1, head_dim: int = 128) -> float:
        return self.launch_overhead_s(self.launch(batch, heads, kv_heads, sms, kv_len, head_dim), sms, clock_hz)

    def cta_units(self, launch: tuple[int, int, bool]) -> int:
        """The CTAs the per-CTA cost counts: every CTA launched, but for FlashAttention-3 ("fa3"), whose split CTAs
        share one packed query tile, one per (sequence, KV head): fitted so, the A100 rows read 11.6% against 11.7%,
        and a longer cache that splits fewer ways never costs less (module doc)."""
        return launch[0] // launch[1] if self.split == "fa3" else launch[0]

    def launch_overhead_s(self, launch: tuple[int, int, bool], sms: int, clock_hz: float | None = None) -> float:
        """The fixed, per-CTA and combine costs of a call launched as `launch` (Decode.launch's answer)."""
        cycles_s = self.fixed_cycles / clock_hz if self.fixed_cycles else 0.0
        combine_s = self.combine_s if launch[1] > 1 else 0.0
        per_cta, extra = (self.mha_cta_s, self.mha_fixed_s) if launch[2] else (self.cta_s, 0.0)
        return self.fixed_s + cycles_s + extra + per_cta * self.cta_units(launch) / sms + combine_s

    def stream(self, mha: bool = False) -> tuple[float, float]:
        """(DRAM stream efficiency, ramp CTAs) of the grouped-query kernel, or of the MHA one (`mha`)."""
        if mha and self.mha_kv_stream_efficiency is not None:
            ramp = self.kv_ramp_ctas if self.mha_kv_ramp_ctas is None else self.mha_kv_ramp_ctas
            return self.mha_kv_stream_efficiency, ramp
        return self.kv_stream_efficiency, self.kv_ramp_ctas

    def memory_s(self, kv_bytes: float, ctas: int, bandwidth: float, mha: bool = False,
                 peak: float | None = None) -> float:
        """The KV stream from DRAM at `bandwidth` (the tier's rate x memory_max) x the fitted efficiency, never above
        the tier's `peak`: the efficiency is fitted against memory_max, which a kernel may beat (module doc)."""
        eff, ramp = self.stream(mha)
        rate = bandwidth * eff if peak is None else min(bandwidth * eff, peak)
        return kv_bytes / rate * (1.0 + ramp / max(ctas, 1))

    def l2_memory_s(self, kv_bytes: float, ctas: int, l2_bandwidth: float, mha: bool = False) -> float:
        """The KV stream re-read from L2 (a single-layer replay, module doc): the cited L2 rate at the
        fitted l2_stream_efficiency, not the DRAM stream efficiency fitted on caches larger than any L2,
        with the same ramp in CTAs."""
        return kv_bytes / (l2_bandwidth * self.l2_stream_efficiency) * (1.0 + self.stream(mha)[1] / max(ctas, 1))

    def walk_s(self, kv_len: int, mha: bool = False) -> float:
        """The least time the KV term takes where the kernel does not split the sequence: one CTA walks all
        kv_len tokens of its (sequence, KV head) (module doc); per call kind, grouped-query or MHA."""
        return kv_len * (self.mha_kv_walk_s_per_token if mha else self.kv_walk_s_per_token)

    def kv_s(self, kv_bytes: float, ctas: int, bandwidth: float, kv_len: int, mha: bool,
             l2_bandwidth: float | None = None, peak: float | None = None) -> float:
        """The KV term: the stream (from the L2 at `l2_bandwidth` where a single-layer replay re-reads a
        resident cache, else from DRAM at `bandwidth`, at most `peak`), or the unsplit walk where that takes longer."""
        stream = (self.memory_s(kv_bytes, ctas, bandwidth, mha, peak) if l2_bandwidth is None
                  else self.l2_memory_s(kv_bytes, ctas, l2_bandwidth, mha))
        return max(stream, self.walk_s(kv_len, mha))

    def time_s(self, batch: int, heads: int, kv_heads: int, kv_bytes: float, sms: int, bandwidth: float,
               clock_hz: float | None = None, kv_len: int = 0) -> float:
        launch = self.launch(batch, heads, kv_heads, sms, kv_len)
        return (self.launch_overhead_s(launch, sms, clock_hz)
                + self.kv_s(kv_bytes, launch[0], bandwidth, kv_len, launch[2]))


PREFILL_FIELDS = ("prefill", "prefill_kv", "prefill_fp8_query", "prefill_sm")


class AttentionFamily(PrefillCurves):
    description: str = ""
    cite: str                                   # the engines' source and the measured tables
    decode: dict[str, Decode] = {}              # KV format -> figures
    prefill_from: str | None = None             # take every prefill curve from this family (module doc)
    # A prefill step's call runs the engine's context kernel even for one new token (TensorRT-LLM's attention op
    # sends context requests to its FMHA, generation ones to XQA); else a one-token call is priced as decode, as
    # one varlen kernel runs both (vLLM's and SGLang's FlashAttention).
    context_kernel: bool = False
    prefill_sm: dict[float, PrefillCurves] = {}   # compute capability -> that architecture's curves

    @field_validator("decode")
    @classmethod
    def _formats(cls, v: dict) -> dict:
        return format_keys(v)

    def prefill_for(self, kv_fmt: str | None, q_fmt: str | None = None,
                    capability: float | None = None) -> Prefill | None:
        """The prefill curve of a query in `q_fmt` on a KV cache stored in `kv_fmt`, on a GPU of that compute
        capability: the most specific curve its architecture's set or else the family's own gives (module doc)."""
        sets = [self.prefill_sm[capability]] if capability in self.prefill_sm else []
        ranked = zip(*(c.curves(kv_fmt, q_fmt) for c in (*sets, self)))
        return next((c for level in ranked for c in level if c is not None), None)


class AttentionRule(Strict):
    """One line of an engine's attention-backend choice: `family` runs where the GPU's compute
    capability major is one of `capability_major`, its exact capability one of `capability` (SM 8.9 apart
    from SM 8.0: the engines build kernels per SM version), and the KV cache is stored in one of `kv`
    (an empty list matches anything; a GPU without compute_capability matches no capability list)."""
    family: str
    capability_major: list[int] = []
    capability: list[float] = []
    kv: list[str] = []

    @field_validator("kv")
    @classmethod
    def _kv(cls, v: list[str]) -> list[str]:
        try:
            return [same_kernels_refused(get_format(k).name) for k in v]
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    def matches(self, capability: float | None, kv_fmt: str | None) -> bool:
        if self.capability_major and (capability is None or int(capability) not in self.capability_major):
            return False
        if self.capability and capability not in self.capability:
            return False
        return not self.kv or (kv_fmt is not None and kernel_format(kv_fmt) in self.kv)


def select_family(default: str | None, rules: list[AttentionRule], capability: float | None,
                  kv_fmt: str | None) -> str | None:
    """The first rule that matches names the family; none: `default` (the stack's `attention`)."""
    return next((r.family for r in rules if r.matches(capability, kv_fmt)), default)


def kv_format(op: Op) -> str | None:
    """The storage format of `op`'s KV-cache reads (None: it reads none)."""
    return next((t.fmt for t in op.reads if t.role == "kv"), None)


class AttentionKernels(Strict):
    families: dict[str, AttentionFamily]
    source: str = Field(default="", exclude=True)

    @field_validator("families")
    @classmethod
    def _prefill_from(cls, v: dict[str, AttentionFamily]) -> dict[str, AttentionFamily]:
        """A family with `prefill_from` takes that family's prefill curves (module doc)."""
        out = dict(v)
        for name, fam in v.items():
            if fam.prefill_from is None:
                continue
            src = v.get(fam.prefill_from)
            if (src is None or src.prefill_from is not None or any(getattr(fam, f) for f in PREFILL_FIELDS)
                    or not any(getattr(src, f) for f in PREFILL_FIELDS)):
                raise ValueError(f"{name}: prefill_from {fam.prefill_from!r} must name a family with prefill curves "
                                 f"of its own, and the family give none itself")
            out[name] = fam.model_copy(update={f: getattr(src, f) for f in PREFILL_FIELDS})
        return out


def attention_families(path: Path = KERNELS_FILE, measured: Path | None = MEASURED_FILE) -> dict[str, AttentionFamily]:
    """The families fitted on the aic tables (`path`), with those fitted on this project's own measurements
    (`measured`: PyTorch's SDPA kernels on the H200); a name lives in one file."""
    return read_family_files(AttentionKernels, path, measured)


def family_names() -> list[str]:
    return sorted(attention_families())


def l2_resident(unit: Unit, kv_bytes: float) -> bool:
    """Whether a single-layer replay re-reads `kv_bytes` of KV cache from `unit`'s L2 (module doc)."""
    return bool(unit.l2_bytes and unit.l2_bandwidth_bytes_per_s and kv_bytes <= unit.l2_bytes)


def attention_cost(op: Op, unit: Unit, unit_name: str, tier: Tier, family: str,
                   single_layer_replay: bool = False) -> OpCost | None:
    """`op` (a fused attention op) as `family`'s kernel; None where the family has no figures
    for it (a KV format not fitted, no prefill curve, a unit without its SM count): the op
    then keeps the roofline. `single_layer_replay`: the measurement condition of per-op tables
    (module doc), under which a KV cache that fits the L2 streams from it."""
    fam = attention_families().get(family)
    if fam is None:
        raise ConfigError(f"attention: unknown kernel family {family!r}; families: {', '.join(family_names())}")
    if op.kind != g.ATTENTION:
        return None
    d = op.dims
    kv = [t for t in op.reads if t.role == "kv"]
    kv_bytes = float(sum(t.bytes for t in kv))
    energy = op.bytes * (tier.energy_j_per_byte or 0.0) + unit.flop_energy_j(op.flops, "bf16")
    if d.get("q_len", 1) == 1 and not (d.get("context") and fam.context_kernel):
        fig = fam.decode.get(kernel_format(kv[0].fmt)) if kv else None
        sms, clock = unit.efficiency.parallel_units, unit.efficiency.clock_hz
        if fig is None or not sms or (fig.fixed_cycles and not clock):
            return None
        bw = tier.bandwidth_bytes_per_s * unit.efficiency.for_kind(g.ATTENTION).memory_max
        heads, batch = d.get("heads", 1), d.get("batch", 1)
        kv_heads = d.get("kv_heads", heads)
        l2_bw = unit.l2_bandwidth_bytes_per_s if single_layer_replay and l2_resident(unit, kv_bytes) else None
        kv_len = d.get("kv_len", 1)
        launch = fig.launch(batch, heads, kv_heads, sms, kv_len, d.get("head_dim", 128))
        memory_s = fig.kv_s(kv_bytes, launch[0], bw, kv_len, launch[2], l2_bw, tier.peak_bytes_per_s)
        overhead_s = fig.launch_overhead_s(launch, sms, clock)
        return OpCost(op, unit_name, overhead_s + memory_s, 0.0, memory_s, overhead_s,
                      bound_of(0.0, memory_s, overhead_s), f"{family} decode", energy)
    q = next((t.fmt for t in op.reads if t.role == "activation"), None)
    pf = fam.prefill_for(kv[0].fmt if kv else None, q, unit.efficiency.compute_capability)
    if pf is None or "bf16" not in native_rates(unit, unit_name):
        return None
    compute_s = op.flops / (native_rates(unit, unit_name)["bf16"] * pf.fraction(chunk_length(d["q_len"], d["kv_len"])))
    overhead_s = pf.fixed_s + pf.walk_s(d["kv_len"])
    return OpCost(op, unit_name, overhead_s + compute_s, compute_s, 0.0, overhead_s,
                  bound_of(compute_s, 0.0, overhead_s), f"{family} prefill", energy)
