"""Fit a preset's efficiency curves to measured ops.

The model is the GPU/CPU roofline of hw_models.cost.roofline_cost:

    t = overhead + max(flops / (rate * eff_c(flops)), bytes / (bw * eff_m(bytes)))
    eff(x) = max * x / (x + half)

with four curve parameters (compute_max, compute_half_flops, memory_max,
memory_half_bytes) and the launch overhead. GEMMs' compute efficiency also
multiplies by the tile/wave utilization Efficiency.gemm_waves when the base
preset gives `parallel_units` (the SM count): the tile (tile_m x tile_n) is
chosen from the small set TILES (or none) by the best GEMM fit on the
calibration ops, and written to the preset. Non-matrix kinds get no compute
ramp in the one-curve fit, as in roofline_cost; their per-kind fits set
compute_half_flops explicitly, which roofline_cost then uses. scipy's least_squares minimizes
log(simulated) - log(measured), so a 2-us norm and a 6-ms GEMM weigh alike.
One fit over all ops gives the unit's curve; with `per_kind`, each op kind
(gemm, norm, elementwise, ...) also gets its own fit, stored as
Efficiency.by_kind overrides, because tensor-core GEMMs and streaming kernels
do not share one curve. Parameters a kind's data cannot pin down (compute
terms of memory-bound kernels) stay at the base preset's values.

Optionally GEMMs with M <= gemv_max_m form their own class with their own fit
(Efficiency.gemv): BLAS runs 1-row products as matrix-vector kernels that stream
the weights at another rate than the packed GEMM path. The threshold is chosen
from GEMV_MAX_M (or none) by the GEMM classes' fit on the calibration ops, as the
tile is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from hw_models import compute_path
from hw_models.cost import MATRIX_KINDS, gemm_dims, weight_format, work_time_s
from hw_models.machine import Efficiency, Machine, machine_from_dict, raw_machine
from sim.core import graph as g
from sim.core.errors import ConfigError
from sim.apps.trace.records import StepShape, Trace
from sim.apps.trace.calibrate_preset import write_preset  # noqa: F401 (re-exported: its home until stop 72)
from sim.apps.trace.shapes import step_graph

PARAMS = ("compute_max", "compute_half_flops", "memory_max", "memory_half_bytes", "overhead_s")
# Output tiles (tile_m, tile_n) calibration may choose for the GEMM wave term: the
# CUTLASS/cuBLAS Ampere tile shapes seen in the A6000 traces' kernel names
# (64x64, 128x64, 128x128, 128x256, 256x128). None = no wave term.
TILES: tuple[tuple[int, int] | None, ...] = (None, (64, 64), (128, 64), (64, 128), (128, 128), (128, 256),
                                             (256, 128))
# Small-M thresholds calibration may choose (None = one GEMM curve). 1 = matrix-vector
# only; 8 and 64 would group short batched GEMMs with it.
GEMV_MAX_M: tuple[int | None, ...] = (None, 1, 8, 64)
GEMV = "gemv"   # the fit class of GEMMs with M <= gemv_max_m


@dataclass
class Samples:
    """Measured ops as arrays: the roofline inputs of each and its measured time."""

    kind: list[str] = field(default_factory=list)
    flops: list[float] = field(default_factory=list)
    nbytes: list[float] = field(default_factory=list)
    rate: list[float] = field(default_factory=list)
    measured_s: list[float] = field(default_factory=list)
    mnk: list[tuple[int, int, int] | None] = field(default_factory=list)   # GEMM dims, None otherwise
    gemv_max_m: int | None = None      # GEMMs with M <= this are in class GEMV
    sources: set[str] = field(default_factory=set)
    trace: list[str] = field(default_factory=list)   # each op's trace (a table's TP degree apart)

    def __len__(self) -> int:
        return len(self.kind)

    def cls(self, i: int) -> str:
        """The fit class of op i: its kind, or GEMV for a GEMM with M <= gemv_max_m."""
        mnk = self.mnk[i]
        small = self.gemv_max_m is not None and mnk is not None and mnk[0] <= self.gemv_max_m
        return GEMV if small else self.kind[i]

    def classes(self) -> list[str]:
        return sorted({self.cls(i) for i in range(len(self))})

    def with_gemv(self, gemv_max_m: int | None) -> "Samples":
        return Samples(self.kind, self.flops, self.nbytes, self.rate, self.measured_s, self.mnk, gemv_max_m,
                       self.sources, self.trace)

    def select(self, kind: str | None, tiles: Efficiency | None = None, ramp_vector: bool = True
               ) -> tuple[np.ndarray, ...]:
        """flops, bytes, rate, measured time, the GEMM wave scale under `tiles` (1 for
        other ops or no tiles) and a 0/1 mask of ops that get the compute ramp (all but
        non-matrix ops when `ramp_vector` is False), for ops of class `kind` (None: all; see cls)."""
        idx = [i for i in range(len(self)) if kind is None or self.cls(i) == kind]
        pick = lambda xs: np.asarray([xs[i] for i in idx], dtype=float)  # noqa: E731
        scale = np.ones(len(idx))
        gem = [j for j, i in enumerate(idx) if self.mnk[i] is not None]
        if tiles is not None and tiles.tiled and gem:
            m, n, k = (np.asarray([self.mnk[idx[j]][d] for j in gem], dtype=float) for d in range(3))
            scale[gem] = tiles.gemm_waves(m, n, k)
        ramp = np.asarray([1.0 if ramp_vector or self.kind[i] in MATRIX_KINDS else 0.0 for i in idx])
        return pick(self.flops), pick(self.nbytes), pick(self.rate), pick(self.measured_s), scale, ramp


# A curve of len(PARAMS) parameters fitted on fewer distinct (FLOPs, bytes) points passes through each: its fitted MAPE
# reads 0% and says nothing of other shapes (a trial's 20-op table: every kind at 0.0%, one op each), so a set with
# fewer is refused. A kind's own curve frees all five from the all-ops curve's values (bounded): one of fewer than
# MIN_KIND_SHAPES stays on the all-ops curve, and one of 3-5 shapes can still pass near each point, so its fit MAPE says
# little (a review: 0.7% on 3); `--held-out` traces are the check. Freeing fewer for such kinds was tried (stop 72): it
# kept their ramps at the matrix-dominated all-ops values and the A6000's held-out MAPE went 7.7 -> 12.8% (norm 568%
# in sample), so it was not kept.
MIN_SHAPES, MIN_KIND_SHAPES = len(PARAMS) + 1, 3


def distinct_shapes(selected: tuple[np.ndarray, ...]) -> int:
    """Distinct (FLOPs, bytes) points among Samples.select's ops: what a curve can be fitted on."""
    return len(set(zip(selected[0].tolist(), selected[1].tolist())))


def samples(traces: Iterable[Trace], machine: Machine,
            use_step: Callable[[Trace, StepShape], bool] | None = None,
            use_op: Callable[[g.Op], bool] | None = None) -> Samples:
    """Roofline inputs of every measured op (median over repeats) of the steps `use_step`
    keeps, and of those only the ops `use_op` keeps (a stack's own kernels are fitted apart)."""
    unit_name = machine.main_unit
    unit = machine.units[unit_name]
    out = Samples()
    for trace in traces:
        graphs: dict[int, object] = {}
        for m in trace.medians():
            shape = trace.steps[m.step]
            if m.duration_s <= 0 or (use_step is not None and not use_step(trace, shape)):
                continue
            if m.step not in graphs:
                graphs[m.step] = step_graph(trace, shape)
            op = graphs[m.step].op(m.name)
            if use_op is not None and not use_op(op):
                continue
            if op.kind in MATRIX_KINDS:
                wfmt = weight_format(op) if op.kind == g.GEMM else None
                path = compute_path.choose(unit, unit_name, wfmt, op.compute_format)
                if path.dequant:
                    raise ConfigError(f"{trace.source}: {m.name} dequantizes weights; calibration fits plain-format runs")
                rate = path.rate_flops_per_s
            else:
                rate = unit.vector_flops_per_s
            out.kind.append(op.kind)
            out.flops.append(op.flops)
            out.nbytes.append(op.bytes)
            out.rate.append(rate)
            out.measured_s.append(m.duration_s)
            out.mnk.append(gemm_dims(op))
            out.sources.add(trace.source.split("#")[0])
            out.trace.append(trace.source)
    if not len(out):
        raise ConfigError("no measured ops to calibrate on")
    return out


def predict_s(p: dict[str, float], flops: np.ndarray, nbytes: np.ndarray, rate: np.ndarray,
              bandwidth: float, scale=1.0, ramp=1.0) -> np.ndarray:
    """The roofline with parameters `p` (PARAMS), vectorized over ops; `scale` is each
    op's GEMM wave utilization, `ramp` 1 where the compute ramp applies and 0 where
    roofline_cost drops it (non-matrix ops without a per-kind curve)."""
    eff = Efficiency(compute_max=p["compute_max"], compute_half_flops=p["compute_half_flops"],
                     memory_max=p["memory_max"], memory_half_bytes=p["memory_half_bytes"])
    flat = Efficiency(compute_max=p["compute_max"])

    def compute_eff(f):
        return np.where(np.asarray(ramp) > 0, eff.compute(f), flat.compute(f))

    return p["overhead_s"] + np.maximum(work_time_s(flops, rate, compute_eff, scale),
                                        work_time_s(nbytes, bandwidth, eff.memory))


# Fit space: maxima linear in (0, 1]; halves and overhead in log10 (they span decades).
FIT_LOW = np.array([1e-4, 0.0, 1e-4, 0.0, -9.0])   # a datasheet socket vs a loaded 2-vCPU VM: 1e-2 is too high a floor
FIT_HIGH = np.array([1.0, 13.0, 1.0, 10.0, -2.0])


def _to_x(p: dict[str, float]) -> np.ndarray:
    x = np.array([p["compute_max"], math.log10(p["compute_half_flops"] + 1.0), p["memory_max"],
                  math.log10(p["memory_half_bytes"] + 1.0), math.log10(max(p["overhead_s"], 1e-9))])
    return np.clip(x, FIT_LOW + 1e-9, FIT_HIGH - 1e-9)


def _from_x(x: np.ndarray) -> dict[str, float]:
    return dict(compute_max=float(x[0]), compute_half_flops=float(10 ** x[1] - 1.0), memory_max=float(x[2]),
                memory_half_bytes=float(10 ** x[3] - 1.0), overhead_s=float(10 ** x[4]))


@dataclass(frozen=True)
class Fit:
    params: dict[str, float]
    rms_log_residual: float     # RMS of ln(simulated / measured)
    mape: float                 # mean |simulated - measured| / measured on the fitted ops
    n: int
    fixed: frozenset[str] = frozenset()   # parameters the data did not constrain (kept at the start value)


def fit(flops, nbytes, rate, measured_s, scale, ramp, bandwidth: float, start: dict[str, float],
        fixed: frozenset[str] = frozenset()) -> Fit:
    """Least squares on log-time residuals from `start`; parameters in `fixed` keep their start value."""
    from scipy.optimize import least_squares   # slow to import (0.4 s): only when fitting
    x0 = _to_x(start)
    free = np.array([p not in fixed for p in PARAMS])

    def full(xf):
        x = x0.copy()
        x[free] = xf
        return x

    def residuals(xf):
        return np.log(predict_s(_from_x(full(xf)), flops, nbytes, rate, bandwidth, scale, ramp)) - np.log(measured_s)

    res = least_squares(residuals, x0[free], bounds=(FIT_LOW[free], FIT_HIGH[free]), x_scale=(FIT_HIGH - FIT_LOW)[free],
                        method="trf")
    params = _from_x(full(res.x))
    pred = predict_s(params, flops, nbytes, rate, bandwidth, scale, ramp)
    return Fit(params, float(np.sqrt(np.mean(res.fun ** 2))),
               float(np.mean(np.abs(pred - measured_s) / measured_s)), len(measured_s), fixed)


def fit_constrained(flops, nbytes, rate, measured_s, scale, ramp, bandwidth: float, start: dict, keep=None) -> Fit:
    """`fit`, but the compute ramp stays at its start value (at `keep`'s where given) when the data cannot tell it
    from the memory term: if the fitted ramp turns ops memory-bound at the start (base preset) compute-bound, it
    explains memory time (decode GEMMs' FLOPs and bytes both scale with N x K), and a path it never saw (int4
    weights dequantized: fewer bytes, same FLOPs) would inherit it. Streaming kinds keep none (`keep`), not the
    matrix ops' fill time: at the vector rate that gave an A100 `add` +2160% (issue 17 item 12)."""
    f = fit(flops, nbytes, rate, measured_s, scale, ramp, bandwidth, start)
    def bound(p):
        eff = Efficiency(compute_max=p["compute_max"], compute_half_flops=p["compute_half_flops"] * np.max(ramp),
                         memory_max=p["memory_max"], memory_half_bytes=p["memory_half_bytes"])
        return work_time_s(flops, rate, eff.compute, scale) > work_time_s(nbytes, bandwidth, eff.memory)
    flipped = bound(f.params) & ~bound(start)
    if flipped.sum() > 0.25 * max((~bound(start)).sum(), 1):
        return fit(flops, nbytes, rate, measured_s, scale, ramp, bandwidth, keep or start, frozenset({"compute_half_flops"}))
    return f


@dataclass
class Calibration:
    base: str
    unit: str
    overall: Fit
    by_kind: dict[str, Fit]
    tile: tuple[int, int] | None         # the GEMM wave tile chosen, None = no wave term
    tile_scores: dict[str, float]         # GEMM fit RMS log residual per candidate tile
    sources: list[str]
    machine: Machine
    raw: dict            # the preset as YAML data: the base file's text values, fitted fields replaced
    gemv_max_m: int | None = None                               # the small-M GEMM threshold chosen
    gemv_scores: dict[str, float] = field(default_factory=dict)  # GEMM classes' RMS log residual per candidate
    kept: list[str] = field(default_factory=list)   # kinds left on the unit's curve (< min_traces traces, < MIN_KIND_SHAPES)

    @property
    def mape(self) -> float:
        """Fitted-set MAPE of the calibrated machine (per-kind curves where fitted)."""
        fits = self.by_kind.values() if self.by_kind else [self.overall]
        return sum(f.mape * f.n for f in fits) / sum(f.n for f in fits)


def calibrate(traces: list[Trace], base: Machine, per_kind: bool = True, name: str | None = None,
              use_step: Callable[[Trace, StepShape], bool] | None = None,
              tiles: Iterable[tuple[int, int] | None] | None = None,
              gemv_max_m: Iterable[int | None] | None = None,
              use_op: Callable[[g.Op], bool] | None = None, min_traces: int = 1) -> Calibration:
    """Fit `base`'s efficiency curves to the traces' ops (the steps `use_step` keeps).
    `tiles`: the GEMM wave tiles to choose from (default TILES; needs parallel_units).
    `gemv_max_m`: the small-M GEMM thresholds to choose from (default: the base
    preset's own, i.e. no small-M class unless it has one; GEMV_MAX_M to search). `min_traces`: a kind
    gets its own curve only with ops from this many traces (else it stays on the all-ops curve)."""
    if base.kind not in ("gpu", "cpu"):
        raise ConfigError(f"{base.name}: calibrate fits gpu/cpu roofline presets, not kind {base.kind!r}")
    data = samples(traces, base, use_step, use_op)
    unit_name = base.main_unit
    unit = base.units[unit_name]
    bw = base.memory[unit.memory].bandwidth_bytes_per_s
    # Presets may give their ramps as times (compute_ramp_s, memory_ramp_s); the fit works in
    # sizes at the base's own rates (fp16 matrix rate, device bandwidth), which it writes out.
    rate = unit.peak_flops_per_s.get("fp16") or max(unit.peak_flops_per_s.values())
    e = unit.efficiency.at_rates(rate, bw)
    start = dict(compute_max=e.compute_max, compute_half_flops=e.compute_half_flops, memory_max=e.memory_max,
                 memory_half_bytes=e.memory_half_bytes, overhead_s=max(unit.launch_overhead_s, 1e-7))
    enough_shapes(data)
    tile, scores = choose_tile(data, e, bw, start, tiles)
    waves = _tiled(e, tile)
    overall = fit_constrained(*data.select(None, waves, ramp_vector=False), bw, start)
    gemv_m, gemv_scores = choose_gemv(data, waves, bw, overall.params,
                                      [e.gemv_max_m] if gemv_max_m is None else gemv_max_m) if per_kind \
        else (None, {})
    data = data.with_gemv(gemv_m)
    kinds, kept = kind_fits(data, waves, bw, overall, min_traces) if per_kind else ({}, [])
    try:  # the base file's own text (units as written), when it is a file
        raw = raw_machine(base.source or base.name)
    except ConfigError:  # a machine built in code
        raw = base.model_dump(exclude_none=True)
    raw["name"] = name or f"{base.name}_calibrated"
    u = raw["units"][unit_name]
    u["launch_overhead_s"] = _round(overall.params["overhead_s"])
    eff = {k: _round(overall.params[k]) for k in PARAMS[:4]}
    eff.update({k: v for k in Efficiency.IDENTITY if (v := getattr(e, k)) is not None})   # what the GPU is
    if tile is not None:
        eff["gemm_tile_m"], eff["gemm_tile_n"] = tile
    if kinds:
        eff["by_kind"] = {k: {p: _round(f.params[p]) for p in PARAMS} for k, f in kinds.items() if k != GEMV}
    if GEMV in kinds:
        eff["gemv_max_m"] = gemv_m
        eff["gemv"] = {p: _round(kinds[GEMV].params[p]) for p in PARAMS}
    u["efficiency"] = eff
    sources = sorted(data.sources)   # the traces whose ops were fitted (use_step may skip whole traces)
    raw["description"] = f"{base.description} -- efficiencies fitted by `sim calibrate` on {len(data)} measured ops"
    machine = machine_from_dict(raw, f"calibrated from {base.name}")
    return Calibration(base.name, unit_name, overall, kinds, tile, scores, sources, machine, raw,
                       gemv_m, gemv_scores, kept)


def enough_shapes(data: Samples) -> None:
    """Refuse a set of fewer than MIN_SHAPES distinct op shapes (a 20-op table had fitted each kind to 0.0%, a trial)."""
    if (n := distinct_shapes(data.select(None))) < MIN_SHAPES:
        raise ConfigError(f"{', '.join(sorted(data.sources))}: {n} distinct op shapes measured; the roofline curve has "
                          f"{len(PARAMS)} parameters, so calibrate needs at least {MIN_SHAPES} (capture more steps or "
                          "layers, or a longer prompt)")


def kind_fits(data: Samples, waves: Efficiency, bw: float, overall: Fit, min_traces: int
              ) -> tuple[dict[str, Fit], list[str]]:
    """Each op class's own curve where its ops come from `min_traces` traces (one trace's shapes cannot tell a kind's
    curve from its shape) and hold MIN_KIND_SHAPES shapes; the classes left on the all-ops curve."""
    kinds, kept = {}, []
    for kind in data.classes():
        traces = {t for t, c in zip(data.trace, map(data.cls, range(len(data)))) if c == kind}
        if len(traces) >= min_traces and distinct_shapes(data.select(kind)) >= MIN_KIND_SHAPES:
            keep = None if kind in MATRIX_KINDS or kind == GEMV else {**overall.params, "compute_half_flops": 0}
            kinds[kind] = fit_constrained(*data.select(kind, waves), bw, overall.params, keep)
        else:
            kept.append(kind)
    return kinds, kept


def _tiled(e: Efficiency, tile: tuple[int, int] | None) -> Efficiency:
    """Only the wave fields matter to Samples.select."""
    if tile is None or e.parallel_units is None:
        return Efficiency()
    return Efficiency(parallel_units=e.parallel_units, gemm_tile_m=tile[0], gemm_tile_n=tile[1])


def choose_tile(data: Samples, e: Efficiency, bandwidth: float, start: dict[str, float],
                tiles: Iterable[tuple[int, int] | None] | None = None
                ) -> tuple[tuple[int, int] | None, dict[str, float]]:
    """The candidate tile whose GEMM-only fit has the smallest RMS log residual on
    the calibration ops. Without `parallel_units` or GEMMs: the base preset's tile
    (None when it has none), no search."""
    base_tile = (e.gemm_tile_m, e.gemm_tile_n) if e.tiled else None
    if e.parallel_units is None or g.GEMM not in data.kind:
        return base_tile, {}
    scores = {}
    for tile in (TILES if tiles is None else tiles):
        f = fit(*data.select(g.GEMM, _tiled(e, tile)), bandwidth, start)
        scores["none" if tile is None else f"{tile[0]}x{tile[1]}"] = f.rms_log_residual
    best = min(scores, key=scores.get)
    return (None if best == "none" else tuple(int(x) for x in best.split("x"))), scores


def choose_gemv(data: Samples, waves: Efficiency, bandwidth: float, start: dict[str, float],
                candidates: Iterable[int | None]) -> tuple[int | None, dict[str, float]]:
    """The small-M threshold whose GEMM-class fits (GEMV and the rest, each its own
    curve) have the smallest RMS log residual over all GEMMs of the calibration ops.
    A threshold that leaves either class empty, or under 5 ops, is skipped; ties
    keep the earlier (smaller) candidate. One candidate: taken as given, no search."""
    candidates = list(candidates)
    if len(candidates) == 1 or g.GEMM not in data.kind:
        return (candidates[0] if g.GEMM in data.kind and candidates else None), {}
    scores: dict[str, float] = {}
    for m in candidates:
        d = data.with_gemv(m)
        groups = [c for c in (GEMV, g.GEMM) if c in d.classes()]
        sizes = [sum(d.cls(i) == c for i in range(len(d))) for c in groups]
        if m is not None and (len(groups) < 2 or min(sizes) < 5):
            continue
        fits = [fit(*d.select(c, waves), bandwidth, start) for c in groups]
        scores["none" if m is None else str(m)] = math.sqrt(
            sum(f.rms_log_residual ** 2 * f.n for f in fits) / sum(f.n for f in fits))
    best = min(scores, key=scores.get)
    return (None if best == "none" else int(best)), scores


def _round(x: float) -> float:
    return float(f"{x:.4g}")
