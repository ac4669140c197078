"""The shared roofline cost of one op on one compute unit reading one memory tier.

Every kind uses it: the GPU and CPU stream (hw_models.gpu), the PIM host
(hw_models.pim), FlexGen's GPU and CPU (hw_models.offload), the spatial PE
arrays' vector work, `sim roofline`, and trace calibration. Time = launch
overhead + max(compute, memory), with the preset's efficiency curves and, for
matrix ops, the compute path of the stored operand's format (compute_path).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from hw_models import compute_path
from hw_models.op_cost import OpCost, bound_of
from hw_models.machine import Tier, Unit
from hw_models.stack.spec import Stack, is_expert_gemm
from hw_models.stack.cost import family_widens, stack_cost
from hw_models.stack.kernel_families import families
from sim.core import graph as g
from sim.core.graph import Op

MATRIX_KINDS = (g.GEMM, g.ATTN_SCORE, g.ATTN_CONTEXT, g.ATTENTION)


def weight_format(op: Op) -> str | None:
    return next((t.fmt for t in op.reads if t.role == "weight" and len(t.shape) > 1), None)


def work_time_s(work, peak, efficiency, scale=1.0):
    """Seconds to do `work` (FLOPs or bytes) at `peak` per second under the efficiency
    curve `efficiency`; 0 for no work. `scale` is the useful fraction of the work the
    units issue (a GEMM's tile/wave utilization, Efficiency.gemm_waves): they do
    work / scale, padded tiles and idle SMs of the last wave included.

    The curve is evaluated on that issued work, not on the useful work: eff(x) =
    max * x / (x + half) makes t = x / (peak * max) + half / (peak * max), i.e. a fixed
    fill/drain time on top of the issued work at the full rate. Evaluating it on the
    useful work instead would charge a small GEMM twice for being small (once in the
    padding, once more in the ramp, and that ramp again divided by the wave utilization),
    and step time fell as M grew (issue 17 item 12: fp32 decode 75.4 -> 50.9 ms from batch
    1 to 10 on a6000_calibrated). Issued work is non-decreasing in M (gemm_waves), so this
    time is too. Floats or numpy arrays (calibration costs many ops at once)."""
    if np.ndim(work) == 0 and np.ndim(scale) == 0:
        if not work:
            return 0.0
        issued = work / scale
        rate = peak * efficiency(issued)
        # A ramp of 1e300 s overflows the curve's half size to infinity and the rate to 0:
        # an infinite time, which the run's finiteness check refuses (not a ZeroDivisionError).
        return issued / rate if rate > 0 else math.inf
    w = np.asarray(work, dtype=float)
    safe = np.where(w > 0, w, 1.0) / scale
    return np.where(w > 0, safe / (peak * efficiency(safe)), 0.0)


def _family_gemm(op: Op, stack: Stack) -> bool:
    """Whether `stack` costs `op` as a quantized GEMM kernel family (no plain roofline needed)."""
    w = weight_format(op)
    return (op.kind == g.GEMM and w is not None and w != op.compute_format
            and stack.family(w, experts=is_expert_gemm(op)) is not None)


def _graph_replayed(plain: OpCost, gap_s: float) -> OpCost:
    """`plain` as a kernel replayed from a CUDA graph: its gap to the previous kernel in place of
    the host launch overhead (issue 28: graph-replayed small GEMMs do not pay the 3 us launch)."""
    return replace(plain, duration_s=plain.duration_s - plain.overhead_s + gap_s, overhead_s=gap_s,
                   bound=bound_of(plain.compute_s, plain.memory_s, gap_s))


def gemm_dims(op: Op) -> tuple[int, int, int] | None:
    """(M, N, K) of a GEMM op, None when the op does not record them."""
    d = op.dims
    return (d["m"], d["n"], d["k"]) if op.kind == g.GEMM and all(d.get(x) for x in "mnk") else None


def _under_stack(op: Op, unit: Unit, unit_name: str, tier: Tier, mode: str, steady: bool, stack: Stack) -> OpCost:
    """roofline_cost under `stack`: its kernels and families where it describes the op, else the plain roofline."""
    plain = None if _family_gemm(op, stack) else roofline_cost(op, unit, unit_name, tier, mode, steady)
    if plain is not None and not steady and stack.graphs and stack.graph_gap_s is not None:
        plain = _graph_replayed(plain, stack.graph_gap_s)
    hit = stack_cost(op, unit, unit_name, tier, stack, plain)
    if mode == "native" and hit is not None and hit.path in families() and family_widens(op, hit.path):
        roofline_cost(op, unit, unit_name, tier, mode, steady)   # refused as without a stack (it had run Marlin's)
    return hit if hit is not None else plain


def roofline_cost(op: Op, unit: Unit, unit_name: str, tier: Tier, mode: str = "auto",
                  steady: bool = False, stack: Stack | None = None) -> OpCost:
    """Time of `op` on `unit` reading and writing `tier`. The efficiency curve is the unit's, or the op kind's
    override where the preset has one. `steady`: the op continues a kernel that is already running (a later slice
    of a pipelined op), so it pays no launch and no ramps: the pipes are already full. `stack`: the software stack's
    kernels and quantized GEMM families (hw_models.stack.cost) where it describes the op; None: one kernel per op."""
    if stack is not None:
        return _under_stack(op, unit, unit_name, tier, mode, steady, stack)
    mnk = gemm_dims(op)
    m = mnk[0] if mnk else None    # selects the small-M (gemv) curve where the preset has one
    eff = unit.efficiency.for_kind(op.kind, m)
    dequant_s = dq = 0.0
    if op.kind in MATRIX_KINDS:
        # The stored operand: weights of a GEMM, the KV cache of attention (compute_path).
        role = "weight" if op.kind == g.GEMM else "kv"
        stored = next((t.fmt for t in op.reads if t.role == role and len(t.shape) > 1), None)
        # The other operand as the op reads it: an unfused attention's probabilities are 16-bit whatever the
        # activation format (sim.core.lowering), so its .V runs at a 16-bit rate, not the activations' MMA.
        act = next((t.fmt for t in op.reads if t.role == "activation" and len(t.shape) > 1), op.compute_format)
        path = compute_path.choose(unit, unit_name, stored, act, mode, role)
        rate, label, efmt = path.rate_flops_per_s, path.label, path.fmt
        if path.dequant:
            elements = sum(t.elements for t in op.reads if t.role == role and len(t.shape) > 1)
            dq = elements * compute_path.DEQUANT_FLOPS_PER_ELEMENT
            # Dequantization streams with the operand over all SMs: no small-op ramp.
            dequant_s = dq / (unit.vector_flops_per_s * eff.compute_max)
    else:
        rate, label, efmt = unit.vector_flops_per_s, "vector", "vector"
    eff = eff.at_rates(rate, tier.bandwidth_bytes_per_s)
    if op.kind not in MATRIX_KINDS:
        over = unit.efficiency.by_kind.get(op.kind)
        if over is None or over.compute_half_flops is None:
            # The compute ramp models tensor-core tiles filling up; streaming vector
            # kernels (norms, adds, softmax) have none unless the preset fits one.
            eff = eff.model_copy(update={"compute_half_flops": 0.0})
    # Tile/wave quantization of GEMMs (Efficiency.gemm_waves; 1.0 unless the preset sets
    # tiles). Attention kernels tile over heads and query blocks, not M x N: not applied.
    if steady:
        eff = eff.model_copy(update={"compute_half_flops": 0.0, "memory_half_bytes": 0.0})
    # The tile is fitted on (or given for) the dense library GEMMs; a weight-only kernel that
    # dequantizes in registers tiles M at the MMA's 16 rows, not at the dense kernel's tile_m,
    # so the wave term is not carried onto it (a6000_calibrated's 64x128 tile would otherwise
    # pad a decode GEMM's M = 1 to 64 and make int4 decode as slow as fp16: issue 15).
    dequant_path = op.kind in MATRIX_KINDS and dequant_s > 0
    dims = mnk if eff.tiled and not dequant_path else None
    waves = eff.gemm_waves(*dims) if dims else 1.0
    compute_s = work_time_s(op.flops, rate, eff.compute, waves) + dequant_s
    nbytes = op.bytes
    memory_s = work_time_s(nbytes, tier.bandwidth_bytes_per_s, eff.memory)
    overhead_s = 0.0 if steady else unit.efficiency.overhead_s(op.kind, unit.launch_overhead_s, m)
    duration = overhead_s + max(compute_s, memory_s)
    energy = (nbytes * (tier.energy_j_per_byte or 0.0) + unit.flop_energy_j(op.flops, efmt)
              + unit.flop_energy_j(dq, "vector"))   # the dequant draws its energy too (MXFP4 decode had read 3.1% low)
    return OpCost(op, unit_name, duration, compute_s, memory_s, overhead_s,
                  bound_of(compute_s, memory_s, overhead_s), label, energy)
