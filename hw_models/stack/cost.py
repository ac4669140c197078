"""Costs under a software stack (hw_models.stack.spec): an op as the kernels the stack
launches, and a quantized GEMM as its kernel family (hw_models.stack.kernel_families).

Used by hw_models.cost.roofline_cost when the workload names a stack; returns None
for ops the stack says nothing about, which keep the preset's one-kernel roofline.

* An op with a KernelSpec: time = kernels x floor + max(compute, traffic x bytes /
  (bandwidth x memory_max x memory_efficiency), serial walk (KernelSpec.serial)). No memory ramp: each kernel's floor
  is the latency a small kernel pays. Compute as the plain roofline computes it.
* A GEMM whose weight format the stack maps to a family: time = family floor +
  max(flops / (rate x fraction(M)), weights / (bandwidth x memory_max x stream
  efficiency) + other bytes / (bandwidth x memory_max), K x the family's serial K-walk
  time per element), plus the activation
  quantization pass (W8A8; with a dynamic scale, the scale pass: max(activations / bandwidth,
  M x quant_row_s)) or the dequantization pass (dequantize-then-GEMM), each one more kernel at
  the stack's floor. Under a single-layer replay (per-op tables) weights whose collector copies fit the
  L2 stream from it at the unit's L2 rate instead (replay_weight_l2_s, with the copies of the row's
  collector); a kernel-spec op's traffic that fits the L2 likewise streams at the L2 rate (replay_l2_s).
  Where the unit lacks the family's native rate and the stack names an emulated family
  for the format (quant_gemm_emulated), that one runs. A family that switches kernel by M (switch_m) costs as its switch_family from that M; a call the host
  launches eagerly (eager_call) never takes less than the family's min_s, and one replayed from a CUDA graph
  costs as its graph_family where the family names one.
* A GEMM whose activations are as narrow as its weights (W8A8 int8: SmoothQuant) runs the stack's
  quant_gemm_w8a8 family for the format: the activations come quantized, no quantize pass of its own.
* A dense 16-bit GEMM replayed from a CUDA graph on a GPU whose preset names a fitted
  dense family (efficiency.dense_gemm): that family's time, as above (no extra pass).
"""

from __future__ import annotations

import math

from hw_models import compute_path
from hw_models.op_cost import OpCost, bound_of
from hw_models.stack.kernel_families import VECTOR, Family, families
from hw_models.machine import Tier, Unit
from hw_models.stack.attention_kernels import attention_cost, kv_format
from hw_models.stack.prefill_curves import SAME_KERNELS
from hw_models.stack.spec import Stack, is_expert_gemm
from sim.core import graph as g
from sim.core.errors import ConfigError
from sim.core.formats import get_format
from sim.core.graph import Op

BF16_BYTES = 2
# A per-op table's GEMM collector cycles through copies of the weights, replayed back to back (aiconfigurator
# collector/<engine>/collect_gemm.py run_gemm): TensorRT-LLM max(1, min(5, ceil(L2 / W))) copies (L2 from the
# device), vLLM outside_loop_count 6 (1 for fp8_block and nvfp4), SGLang outside_loop_count 6. Where the copies'
# footprint fits the L2, every replay re-reads the weights from the L2, not the DRAM.
TRTLLM_MAX_COPIES = 5
SIX_COPY_COLLECTORS = ("vllm", "sglang")
VLLM_ONE_COPY_FORMATS = ("fp8_block128", "nvfp4")
# what a dense family's bf16 rate covers: bf16 and the formats that run its kernels (prefill_curves.SAME_KERNELS)
DENSE_FORMATS = ("bf16", *(f for f, same in SAME_KERNELS.items() if same == "bf16"))


def _weight(op: Op):
    return next((t for t in op.reads if t.role == "weight" and len(t.shape) > 1), None)


def _has_rate(fam: Family, unit: Unit, unit_name: str) -> bool:
    return fam.rate_format == VECTOR or fam.rate_format in compute_path.native_rates(unit, unit_name)


def _dense_family(op: Op, unit: Unit, stack: Stack) -> str | None:
    """The GPU's fitted dense GEMM family for a 16-bit GEMM replayed from a CUDA graph (the tables it is
    fitted on are graph-replayed: its floor holds the gap), else None (the roofline with the stack's gap)."""
    name = unit.efficiency.dense_gemm
    if name is None or op.compute_format not in DENSE_FORMATS or not (stack.graphs and stack.graph_gap_s is not None):
        return None
    if name not in families():
        raise ConfigError(f"efficiency.dense_gemm: {name!r} is not a kernel family "
                          f"(hw_models/stack/kernel_families*.yaml: {', '.join(sorted(families()))})")
    return name


def replay_weight_copies(collector: str | None, l2_bytes: float, weight_bytes: float, weight_fmt: str) -> int:
    """The weight copies `collector`'s GEMM loop replays (TRTLLM_MAX_COPIES's note); None: TensorRT-LLM's rule."""
    if collector == "vllm" and weight_fmt in VLLM_ONE_COPY_FORMATS:
        return 1
    if collector in SIX_COPY_COLLECTORS:
        return 6
    return max(1, min(TRTLLM_MAX_COPIES, math.ceil(l2_bytes / weight_bytes)))


def replay_weight_l2_s(unit: Unit, weight_bytes: float, weight_fmt: str = "bf16", collector: str | None = None,
                       l2_bytes_per_s: float | None = None) -> float | None:
    """The weight stream's time from the L2 under a single-layer replay (TRTLLM_MAX_COPIES's note), at
    `l2_bytes_per_s` (a family's fitted replay rate) or else the unit's L2 read rate; None where the copies do not
    fit the L2 or no rate is given (the DRAM stream). Serving never replays one layer (every other layer evicts the
    L2), so never takes this."""
    rate = l2_bytes_per_s or unit.l2_bandwidth_bytes_per_s
    if not rate or not replay_weights_fit(unit, weight_bytes, weight_fmt, collector):
        return None
    return weight_bytes / rate


def replay_weights_fit(unit: Unit, weight_bytes: float, weight_fmt: str = "bf16", collector: str | None = None) -> bool:
    """Whether `collector`'s replayed weight copies (replay_weight_copies) fit `unit`'s L2."""
    return bool(weight_bytes and unit.l2_bytes) and \
        replay_weight_copies(collector, unit.l2_bytes, weight_bytes, weight_fmt) * weight_bytes <= unit.l2_bytes


def replay_l2_s(unit: Unit, traffic_bytes: float) -> float | None:
    """A kernel's traffic re-read from the L2 under a single-layer replay, at the unit's L2 read rate; None where
    it does not fit the L2 or the unit cites no L2 rate (the DRAM stream). A replayed call re-reads the same
    buffers every replay (the RoPE / KV-write kernels of an attention call read the same QKV tensor and write the
    same cache slots), so a working set that fits the L2 never leaves it: the L40S's TensorRT-LLM bf16 ctx_attn
    rows of 128 tokens take 34.9 us for the whole call (median of 112 rows) where their RoPE and KV-write kernels
    alone would take 42.8 us at the DRAM rate, and with this term the SM 8.9 prefill fit goes 22.8% -> 6.8%
    (scripts/fit_kernels.py). Serving never replays one layer (every other layer evicts the L2), so never takes
    this."""
    if not unit.l2_bytes or not unit.l2_bandwidth_bytes_per_s or traffic_bytes > unit.l2_bytes:
        return None
    return traffic_bytes / unit.l2_bandwidth_bytes_per_s


def family_rate(fam: Family, unit: Unit, unit_name: str, stack: Stack, family: str, weight_fmt: str = "") -> float:
    if fam.rate_format == VECTOR:
        return unit.vector_flops_per_s
    rates = compute_path.native_rates(unit, unit_name)
    if fam.rate_format not in rates:
        # Name the weights the workload gave (mxfp4 runs the nvfp4-rated family: one block-scaled FP4 MMA) and the
        # way out, not only the family (a trial read "needs a native nvfp4 rate" for its mxfp4 weights).
        what = f"{weight_fmt} weights run" if weight_fmt else "the"
        raise ConfigError(f"{stack.source or stack.name}: {what} quant_gemm family {family}, priced at the "
                          f"{fam.rate_format} tensor-core rate, which units.{unit_name} lacks (peak_flops_per_s: "
                          f"{', '.join(rates)}); on this GPU give a stack file with `base: {stack.name}` and "
                          f"quant_gemm mapping {weight_fmt or 'the format'} to an emulated family "
                          "(fp4_marlin_emulated for FP4 weights: hw_models/stack/kernel_families.yaml), or another formats.weights")
    return rates[fam.rate_format]


def eager_call(stack: Stack, m: int) -> bool:
    """Whether the host launches a GEMM of `m` rows itself (no CUDA graph replays it): a stack without graphs, a
    step of more tokens than the stack's graphs capture (a GEMM's M is its step's tokens), or a per-op table timed
    without a graph. Such a call pays its family's min_s, the engine's eager dispatch."""
    return (not stack.graphs or stack.eager_replay
            or (stack.graph_max_tokens is not None and m > stack.graph_max_tokens))


def family_cost(op: Op, unit: Unit, unit_name: str, tier: Tier, stack: Stack, family: str,
                named: str | None = None) -> OpCost:
    """`family`'s cost of GEMM `op`; `named`: the family the stack named, where it handed the call on (its
    switch_family or graph_family runs), so that a refusal names what the stack file says."""
    fam = families()[family]
    d = op.dims
    m, n, k = d.get("m", 1), d.get("n", 1), d.get("k", 1)
    if (other_kernel := fam.at(m)) is not None:   # the engine dispatches this M to another kernel
        return family_cost(op, unit, unit_name, tier, stack, other_kernel, named or family)
    eager = eager_call(stack, m)
    if fam.graph_family is not None and not eager:   # replayed: the kernels' device time, measured graph-timed
        return family_cost(op, unit, unit_name, tier, stack, fam.graph_family, named or family)
    bw = tier.bandwidth_bytes_per_s * unit.efficiency.for_kind(g.GEMM, m).memory_max
    w = _weight(op)
    w_bytes = w.bytes if w is not None else 0
    other = op.bytes - w_bytes
    l2_s = replay_weight_l2_s(unit, w_bytes, w.fmt, stack.replay_collector, fam.replay_l2_bytes_per_s) \
        if stack.single_layer_replay and w is not None else None
    label = family if named in (None, family) else f"{named} (here its kernel {family})"
    compute_s = op.flops / (family_rate(fam, unit, unit_name, stack, label, w.fmt if w is not None else "")
                            * fam.rate_fraction(m, l2_s is not None, n * k))
    memory_s = (w_bytes / (bw * fam.weight_stream_efficiency) if l2_s is None else l2_s) + other / bw
    extra_s, overhead_s, passes_b = 0.0, fam.floor_s, 0.0   # passes_b: the bytes the extra kernels move
    if fam.dequant_pass:     # a kernel writes the weights in 16 bits; the GEMM reads those instead
        dense = n * k * BF16_BYTES
        extra_s += (w_bytes + dense) / bw
        memory_s = (dense + other) / bw
        overhead_s += stack.floor_s
        passes_b += 2 * dense
    # A CTA walks K in order: with few tiles the walk's latency, not the stream, sets the pace.
    memory_s = max(memory_s, k * fam.k_walk_s_per_k)
    if fam.activation_quant:  # read 16-bit activations, write 8-bit ones: one more kernel
        extra_s += m * k * (BF16_BYTES + 1) / (bw * fam.quant_stream_efficiency)
        overhead_s += stack.floor_s if fam.quant_floor_s is None else fam.quant_floor_s
        passes_b += 2 * m * k   # it reads 2 B and writes 1 B an element; the GEMM reads 1 B of op.bytes' 2
        if fam.quant_row_s:   # a dynamic scale: one block per token reads the activations again
            extra_s += max(m * k * BF16_BYTES / bw, m * fam.quant_row_s)
            passes_b += m * k * BF16_BYTES
    duration = max(fam.min_s if eager else 0.0, overhead_s + extra_s + max(compute_s, memory_s))
    # the extra kernels' traffic, and the widening of weights the math does not run in (a dequant pass or Marlin's
    # registers: 2 vector FLOPs an element, as the plain path), draw their energy too (a review: only op.bytes had)
    energy = ((op.bytes + passes_b) * (tier.energy_j_per_byte or 0.0) + unit.flop_energy_j(op.flops, fam.rate_format)
              + (unit.flop_energy_j(w.elements * compute_path.DEQUANT_FLOPS_PER_ELEMENT, VECTOR)
                 if w is not None and widens(w.fmt, fam) else 0.0))
    return OpCost(op, unit_name, duration, compute_s, memory_s + extra_s, overhead_s,
                  bound_of(compute_s, memory_s + extra_s, overhead_s), family, energy)


def _unrated_pair(op: Op, fmt: str, unit: Unit, unit_name: str, stack: Stack) -> str | None:
    """The engine's weight-only family for weights and activations both in `fmt` where the unit has no rate for the
    pair (MXFP4 x MXFP4 on an H100: the engine keeps 16-bit activations and runs Marlin; through the plain dequant
    roofline it had read 3.5x faster than MXFP4 x bf16, a trial), where that family (or its emulation) runs here; None:
    the plain roofline, as before."""
    if compute_path.native_pair_rate(unit, unit_name, fmt, fmt) is not None:
        return None
    family = stack.family(fmt, unit.efficiency.compute_capability, is_expert_gemm(op))
    ok = family is not None and (_has_rate(families()[family], unit, unit_name) or stack.emulated_family(fmt))
    return family if ok else None


def widens(weight_fmt: str, fam: Family) -> bool:
    """Whether `fam` runs weights stored in `weight_fmt` widened to a higher-precision rate (Marlin's registers, a
    dequant pass): what their energy, `compute: native` and the widening note (sim.apps.checks) read."""
    return fam.rate_format != VECTOR and get_format(weight_fmt).bits < get_format(fam.rate_format).bits


def family_widens(op: Op, family: str) -> bool:
    """widens() for `op`'s weights under the family named `family` (False where the op has none)."""
    w = _weight(op)
    return w is not None and widens(w.fmt, families()[family])


def stack_cost(op: Op, unit: Unit, unit_name: str, tier: Tier, stack: Stack, plain: OpCost | None
               ) -> OpCost | None:
    """`op` under `stack`, given its plain roofline cost `plain` (for the compute
    term); None where the stack leaves the op to the plain roofline."""
    if op.kind == g.GEMM:
        w = _weight(op)
        if w is None:
            family = None
        elif w.fmt != op.compute_format:   # narrow weights: the family the engine runs on this architecture
            family = stack.family(w.fmt, unit.efficiency.compute_capability, is_expert_gemm(op))
        elif (w8a8 := stack.w8a8_family(w.fmt)) is not None:   # activations as narrow as the weights
            family = w8a8
        elif (weight_only := _unrated_pair(op, w.fmt, unit, unit_name, stack)) is not None:
            family = weight_only
        else:
            family = _dense_family(op, unit, stack)
        if family is not None and stack.emulated_family(w.fmt) and not _has_rate(families()[family], unit, unit_name):
            family = stack.emulated_family(w.fmt)
        if family is not None:
            return family_cost(op, unit, unit_name, tier, stack, family)
    attention = stack.attention_family(unit.efficiency.compute_capability, kv_format(op)) \
        if op.kind == g.ATTENTION else None
    if attention is not None:
        hit = attention_cost(op, unit, unit_name, tier, attention, stack.single_layer_replay)
        if hit is not None:
            return hit
    spec = stack.spec(op)
    if spec is None or plain is None:
        return None
    m = op.dims.get("m") if op.kind == g.GEMM else None
    mm = unit.efficiency.for_kind(op.kind, m).memory_max
    traffic = spec.traffic * op.bytes
    memory_s = (replay_l2_s(unit, traffic) if stack.single_layer_replay else None) \
        or traffic / (tier.bandwidth_bytes_per_s * mm * spec.memory_efficiency)
    overhead_s = stack.floor_of(spec)
    if spec.serial is not None:   # a latency-bound walk: the memory term is the longer of the two
        memory_s = max(memory_s, spec.serial.time_s(op))
    duration = overhead_s + max(plain.compute_s, memory_s)
    return OpCost(op, unit_name, duration, plain.compute_s, memory_s, overhead_s,
                  bound_of(plain.compute_s, memory_s, overhead_s), plain.path,
                  plain.energy_j + (spec.traffic - 1.0) * op.bytes * (tier.energy_j_per_byte or 0.0))
