"""One spatial chip's static cost of an op slice: max(PE-array time from the GEMM's
tiling, SRAM bytes / SRAM bandwidth, KV bytes / DRAM bandwidth when the KV cache
is spilled), non-GEMM ops at the matrix (attention) or vector rate."""

from __future__ import annotations

import math

from hw_models import compute_path
from hw_models.machine import Machine
from hw_models.spatial.config import SpatialConfig
from hw_models.spatial.pe_array import gemm_cycles, shared_gemm_cycles
from sim.core import graph as g
from sim.core.formats import get_format
from sim.core.frozen import frozen
from sim.core.graph import Op

MATRIX_NO_WEIGHT = (g.ATTN_SCORE, g.ATTN_CONTEXT, g.ATTENTION)


@frozen
class SliceCost:
    """One op slice on one chip: the tag of its engine task."""

    op: Op
    unit: str
    fraction: float
    duration_s: float
    compute_s: float
    memory_s: float
    overhead_s: float
    bound: str
    path: str
    flops: float
    sram_bytes: float
    dram_bytes: float
    energy_j: float = 0.0


class ChipModel:
    """Static op timing on one chip."""

    def __init__(self, machine: Machine, cfg: SpatialConfig, compute_mode: str = "auto"):
        self.machine, self.cfg, self.mode = machine, cfg, compute_mode
        self.unit_name = machine.main_unit
        self.unit = machine.units[self.unit_name]
        self.sram = machine.memory[machine.device_tier]
        self.dram = machine.memory[cfg.dram_tier] if cfg.dram_tier else None
        self.array = cfg.pe_array.array()
        self.array_rate = self.unit.peak_flops_per_s[cfg.pe_array.format]

    def pe_time_s(self, M: int, N: int, K: int, fmt: str, rate_flops_per_s: float,
                  weight_bytes_per_element: float = 1.0, installs: bool = True) -> float:
        """GEMM time on the chip's PE arrays, in cycles of the one chip clock.

        The geometry is the one for the compute format `fmt`: the native
        arrays, or a documented mode (pe_array.modes: Groq's fp16 mode is two
        160x320 arrays instead of four 320x320 int8 ones). The folds
        (stationary tiles) are shared among the arrays, and an operand row
        streams per cycle. A format with no geometry of its own runs on the
        native arrays with `ratio` = native peak / format peak fewer MACs per
        cycle, so each fold's T rows take T x ratio cycles and the fill/drain
        skew stays in clock cycles.

        With fold_overlap the skew is paid once per GEMM and a fold costs
        max(streaming, installing the next tile), the install time being the
        bytes of one tile per array (weights at their stored size, widened as
        they enter) / weight_install_bytes_per_cycle (the chip's, shared by
        the arrays), or 0 where that rate is not given (the install always
        hides: an assumption), or where `installs` is off (the streaming alone, what cost() weighs
        the install against). Without it, SCALE-Sim's per-fold
        accounting. See pe_array.shared_gemm_cycles."""
        pe = self.cfg.pe_array
        array, arrays, own = pe.geometry(fmt)
        ratio = 1.0 if own else self.array_rate / rate_flops_per_s
        install = 0.0
        if installs and pe.weight_install_bytes_per_cycle is not None:
            # The chip's install bandwidth is shared by the arrays that take a new tile each fold
            # round: all of them, or fewer when the GEMM has fewer folds than arrays.
            busy = min(arrays, gemm_cycles(array, M, N, K).folds)
            install = busy * array.rows * array.cols * weight_bytes_per_element / pe.weight_install_bytes_per_cycle
        cycles = shared_gemm_cycles(array, M, N, K, arrays=arrays, overlap=pe.fold_overlap, row_cycles=ratio,
                                    install_cycles=install)
        return cycles / pe.clock_hz

    def gemm_path(self, weight_fmt: str | None, act_fmt: str) -> compute_path.ComputePath:
        """Compute path of a GEMM: the spatial chip's mixed-precision rule
        (spatial.mixed_precision_matmul) where it applies, else the core's."""
        if self.cfg.mixed_precision_matmul and weight_fmt is not None:
            rates = compute_path.native_rates(self.unit, self.unit_name)
            s, a = get_format(weight_fmt), get_format(act_fmt)
            # Only element formats with at most a per-row scale: the scale then
            # applies to the accumulator on the way out, not inside the array.
            if (s.name != a.name and s.bits <= 8 and s.block_size in (None, 0) and a.name in rates
                    and a.bits > s.bits and (a.kind == "float" or s.kind == "int")):
                return compute_path.ComputePath(a.name, rates[a.name], False, f"{s.name} x {a.name} in-array")
        return compute_path.choose(self.unit, self.unit_name, weight_fmt, act_fmt, self.mode)

    def cost(self, op: Op, fraction: float, chip: str, k_fraction: float = 1.0) -> SliceCost:
        """`fraction` of the op's work (bytes, FLOPs) on one chip. A GEMM
        keeps k_fraction of its reduction dimension (a row-parallel split)
        and fraction / k_fraction of its output columns."""
        unit, f = self.unit, fraction
        kv_read = sum(t.bytes for t in op.reads if t.role == "kv")
        dram_bytes = f * kv_read if self.cfg.kv_cache == "dram" else 0.0
        sram_bytes = f * op.bytes - dram_bytes
        if op.kind == g.GEMM:
            w = next((t for t in op.reads if t.role == "weight" and len(t.shape) > 1), None)
            path = self.gemm_path(w.fmt if w else None, op.compute_format)
            d = op.dims
            n_slice = max(1, math.ceil(d["n"] * f / k_fraction - 1e-9))
            k_slice = max(1, math.ceil(d["k"] * k_fraction - 1e-9))
            # Bytes per installed weight: its stored size, or the compute format's after a dequantization.
            w_bytes = get_format(path.fmt if path.dequant or w is None else w.fmt).bits / 8
            compute_s = self.pe_time_s(d["m"], n_slice, k_slice, path.fmt, path.rate_flops_per_s, w_bytes)
            # What the array's time is mostly: installing weight tiles (more than its streaming and skew), an
            # architecture trial's point: a decode GEMM at 0.05% of the MXM's FLOPs had read "compute"
            kind = "compute"
            if self.cfg.pe_array.weight_install_bytes_per_cycle is not None:   # else the install always hides
                streaming_s = self.pe_time_s(d["m"], n_slice, k_slice, path.fmt, path.rate_flops_per_s, w_bytes, False)
                kind = "weight install" if compute_s > 2 * streaming_s else kind
            if path.dequant and w is not None:
                dequant_s = f * w.elements * compute_path.DEQUANT_FLOPS_PER_ELEMENT / unit.vector_flops_per_s
                kind = "dequant" if dequant_s > compute_s else kind   # the vector units widening the weights
                compute_s = max(compute_s, dequant_s) if self.cfg.dequant_overlaps_matmul else compute_s + dequant_s
            label = f"PE array {path.label}"
        elif op.kind in MATRIX_NO_WEIGHT:
            path = compute_path.choose(unit, self.unit_name, None, op.compute_format, self.mode)
            compute_s, label = f * op.flops / path.rate_flops_per_s, f"matrix {path.label}"
        else:
            compute_s, label = f * op.flops / unit.vector_flops_per_s, "vector"
        if op.kind != g.GEMM:
            # A dependent op waits for its instruction to reach the chip's last tile.
            compute_s += self.cfg.op_issue_cycles / self.cfg.pe_array.clock_hz
        sram_s = sram_bytes / self.sram.bandwidth_bytes_per_s
        dram_s = dram_bytes / self.dram.bandwidth_bytes_per_s if dram_bytes else 0.0
        memory_s = max(sram_s, dram_s)
        overhead = unit.launch_overhead_s
        times = {"compute": compute_s, "memory": sram_s, "dram": dram_s, "overhead": overhead}
        bound = max(times, key=times.__getitem__)
        if bound == "compute" and op.kind == g.GEMM:
            bound = kind
        # The arithmetic at the unit's energy_j_per_flop (issue 33; 0 without it): the PE array's format, else vector.
        energy = sram_bytes * (self.sram.energy_j_per_byte or 0.0) + unit.flop_energy_j(
            f * op.flops, path.fmt if op.kind == g.GEMM or op.kind in MATRIX_NO_WEIGHT else "vector")
        if dram_bytes:
            energy += dram_bytes * (self.dram.energy_j_per_byte or 0.0)
        return SliceCost(op, chip, f, overhead + max(compute_s, memory_s), compute_s, memory_s, overhead, bound,
                         label, f * op.flops, sram_bytes, dram_bytes, energy)
