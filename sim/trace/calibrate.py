"""Fit a preset's efficiency curves to measured ops.

The model is the GPU/CPU roofline of hw_models.gpu.roofline_cost:

    t = overhead + max(flops / (rate * eff_c(flops)), bytes / (bw * eff_m(bytes)))
    eff(x) = max * x / (x + half)

with four curve parameters (compute_max, compute_half_flops, memory_max,
memory_half_bytes) and the launch overhead. scipy's least_squares minimizes
log(simulated) - log(measured), so a 2-us norm and a 6-ms GEMM weigh alike.
One fit over all ops gives the unit's curve; with `per_kind`, each op kind
(gemm, norm, elementwise, ...) also gets its own fit, stored as
Efficiency.by_kind overrides, because tensor-core GEMMs and streaming kernels
do not share one curve. Parameters a kind's data cannot pin down (compute
terms of memory-bound kernels) stay at the base preset's values.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import yaml
from scipy.optimize import least_squares

from hw_models import compute_path
from hw_models.gpu import MATRIX_KINDS, weight_format, work_time_s
from hw_models.machine import Efficiency, Machine, machine_from_dict, raw_machine
from sim import graph as g
from sim.errors import ConfigError
from sim.trace.parser import StepShape, Trace
from sim.trace.shapes import step_graph

PARAMS = ("compute_max", "compute_half_flops", "memory_max", "memory_half_bytes", "overhead_s")


@dataclass
class Samples:
    """Measured ops as arrays: the roofline inputs of each and its measured time."""

    kind: list[str] = field(default_factory=list)
    flops: list[float] = field(default_factory=list)
    nbytes: list[float] = field(default_factory=list)
    rate: list[float] = field(default_factory=list)
    measured_s: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.kind)

    def select(self, kind: str | None) -> tuple[np.ndarray, ...]:
        idx = [i for i, k in enumerate(self.kind) if kind is None or k == kind]
        pick = lambda xs: np.asarray([xs[i] for i in idx], dtype=float)  # noqa: E731
        return pick(self.flops), pick(self.nbytes), pick(self.rate), pick(self.measured_s)


def samples(traces: Iterable[Trace], machine: Machine,
            use_step: Callable[[Trace, StepShape], bool] | None = None) -> Samples:
    """Roofline inputs of every measured op (median over repeats) of the steps `use_step` keeps."""
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
    if not len(out):
        raise ConfigError("no measured ops to calibrate on")
    return out


def predict_s(p: dict[str, float], flops: np.ndarray, nbytes: np.ndarray, rate: np.ndarray,
              bandwidth: float) -> np.ndarray:
    """The roofline with parameters `p` (PARAMS), vectorized over ops."""
    eff = Efficiency(compute_max=p["compute_max"], compute_half_flops=p["compute_half_flops"],
                     memory_max=p["memory_max"], memory_half_bytes=p["memory_half_bytes"])
    return p["overhead_s"] + np.maximum(work_time_s(flops, rate, eff.compute), work_time_s(nbytes, bandwidth, eff.memory))


# Fit space: maxima linear in (0, 1]; halves and overhead in log10 (they span decades).
_LOW = np.array([1e-4, 0.0, 1e-4, 0.0, -9.0])   # a datasheet socket vs a loaded 2-vCPU VM: 1e-2 is too high a floor
_HIGH = np.array([1.0, 13.0, 1.0, 10.0, -2.0])


def _to_x(p: dict[str, float]) -> np.ndarray:
    x = np.array([p["compute_max"], math.log10(p["compute_half_flops"] + 1.0), p["memory_max"],
                  math.log10(p["memory_half_bytes"] + 1.0), math.log10(max(p["overhead_s"], 1e-9))])
    return np.clip(x, _LOW + 1e-9, _HIGH - 1e-9)


def _from_x(x: np.ndarray) -> dict[str, float]:
    return dict(compute_max=float(x[0]), compute_half_flops=float(10 ** x[1] - 1.0), memory_max=float(x[2]),
                memory_half_bytes=float(10 ** x[3] - 1.0), overhead_s=float(10 ** x[4]))


@dataclass(frozen=True)
class Fit:
    params: dict[str, float]
    rms_log_residual: float     # RMS of ln(simulated / measured)
    mape: float                 # mean |simulated - measured| / measured on the fitted ops
    n: int


def fit(flops, nbytes, rate, measured_s, bandwidth: float, start: dict[str, float]) -> Fit:
    """Least squares on log-time residuals from `start`."""
    def residuals(x):
        return np.log(predict_s(_from_x(x), flops, nbytes, rate, bandwidth)) - np.log(measured_s)

    res = least_squares(residuals, _to_x(start), bounds=(_LOW, _HIGH), x_scale=_HIGH - _LOW, method="trf")
    params = _from_x(res.x)
    pred = predict_s(params, flops, nbytes, rate, bandwidth)
    return Fit(params, float(np.sqrt(np.mean(res.fun ** 2))),
               float(np.mean(np.abs(pred - measured_s) / measured_s)), len(measured_s))


@dataclass
class Calibration:
    base: str
    unit: str
    overall: Fit
    by_kind: dict[str, Fit]
    sources: list[str]
    machine: Machine
    raw: dict            # the preset as YAML data: the base file's text values, fitted fields replaced

    @property
    def mape(self) -> float:
        """Fitted-set MAPE of the calibrated machine (per-kind curves where fitted)."""
        fits = self.by_kind.values() if self.by_kind else [self.overall]
        return sum(f.mape * f.n for f in fits) / sum(f.n for f in fits)


def calibrate(traces: list[Trace], base: Machine, per_kind: bool = True, name: str | None = None,
              use_step: Callable[[Trace, StepShape], bool] | None = None) -> Calibration:
    if base.kind not in ("gpu", "cpu"):
        raise ConfigError(f"{base.name}: calibrate fits gpu/cpu roofline presets, not kind {base.kind!r}")
    data = samples(traces, base, use_step)
    unit_name = base.main_unit
    unit = base.units[unit_name]
    bw = base.memory[unit.memory].bandwidth_bytes_per_s
    e = unit.efficiency
    start = dict(compute_max=e.compute_max, compute_half_flops=e.compute_half_flops, memory_max=e.memory_max,
                 memory_half_bytes=e.memory_half_bytes, overhead_s=max(unit.launch_overhead_s, 1e-7))
    overall = fit(*data.select(None), bw, start)
    kinds = {}
    if per_kind:
        for kind in sorted(set(data.kind)):
            kinds[kind] = fit(*data.select(kind), bw, overall.params)
    try:  # the base file's own text (units as written), when it is a file
        raw = raw_machine(base.source or base.name)
    except ConfigError:  # a machine built in code
        raw = base.model_dump(exclude_none=True)
    raw["name"] = name or f"{base.name}_calibrated"
    u = raw["units"][unit_name]
    u["launch_overhead_s"] = _round(overall.params["overhead_s"])
    eff = {k: _round(overall.params[k]) for k in PARAMS[:4]}
    if kinds:
        eff["by_kind"] = {k: {p: _round(f.params[p]) for p in PARAMS} for k, f in kinds.items()}
    u["efficiency"] = eff
    sources = sorted(dict.fromkeys(t.source.split("#")[0] for t in traces))
    raw["description"] = f"{base.description} -- efficiencies fitted by `sim calibrate` on {len(data)} measured ops"
    machine = machine_from_dict(raw, f"calibrated from {base.name}")
    return Calibration(base.name, unit_name, overall, kinds, sources, machine, raw)


def _round(x: float) -> float:
    return float(f"{x:.4g}")


def write_preset(cal: Calibration, path: str | Path, note: str = "") -> Path:
    """The calibrated machine as a preset YAML whose header records the fit."""
    path = Path(path)
    data = cal.raw
    date = _dt.date.today().isoformat()
    lines = [
        f"# {data['name']}: {cal.base} with its efficiency curves and launch overhead fitted to measured ops",
        f"# by `sim calibrate` (scipy.optimize.least_squares on log-time residuals), {date}.",
        f"# Peaks, capacities and bandwidths are {cal.base}.yaml's datasheet figures (see the citations there);",
        "# only units.*.efficiency and launch_overhead_s are fitted. Fitted on:",
        *[f"#   {s}" for s in cal.sources],
        f"# Fit: all ops, one curve: RMS log residual {cal.overall.rms_log_residual:.3f}, "
        f"MAPE {cal.overall.mape:.1%} over {cal.overall.n} ops.",
        *[f"#   {k}: RMS log residual {f.rms_log_residual:.3f}, MAPE {f.mape:.1%} over {f.n} ops"
          for k, f in cal.by_kind.items()],
        *([f"# {line}" for line in note.splitlines()]),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n" + yaml.safe_dump(data, sort_keys=False))
    return path
