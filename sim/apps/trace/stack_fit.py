"""Fit a software stack's per-kernel figures (hw_models.stack.spec) to measured ops.

Under a stack an op costs  kernels x floor + max(compute, traffic x bytes /
(bandwidth x memory_max x memory_efficiency))  (hw_models.stack.cost). The kernel
count and traffic come from the engine's code (cited in the stack file); what
this fits, per spec (an op kind or a named op, prefill and decode apart where the
stack splits them), is the two figures its data constrain: the floor per kernel
and the memory efficiency. scipy's least_squares on log-time residuals, so a
1-us decode add and a 1-ms prefill norm weigh alike. A spec with under 4 ops, or
whose ops span under 10x in bytes (the floor and the slope cannot be told
apart), keeps its stack values and is reported as unconstrained.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


from hw_models.cost import roofline_cost
from hw_models.machine import Machine
from hw_models.stack.row_kernels import serial_values
from hw_models.stack.spec import Stack
from sim.apps.trace.parser import Trace
from sim.apps.trace.shapes import step_graph

MIN_OPS = 4
MIN_SPAN = 10.0


@dataclass(frozen=True)
class SpecFit:
    key: str                  # "norm", "names.act", "softmax.prefill"
    n: int
    floor_s: float | None     # None: not constrained by the data
    memory_efficiency: float | None
    mape: float               # on the fitted ops, after the fit
    serial_per_s: float | None = None   # the spec's serial walk step, where it has one


def _key(stack: Stack, op) -> str | None:
    base = f"names.{op.base_name}" if op.base_name in stack.names else op.kind
    spec = stack.names.get(op.base_name) or stack.ops.get(op.kind)
    if spec is None:
        return None
    return f"{base}.prefill" if spec.prefill is not None and op.dims.get("q_len", 1) > 1 else base


def _rows(traces: list[Trace], machine: Machine, stack: Stack) -> dict[str, list[tuple]]:
    """Per spec key: (kernels, traffic bytes / (bw x memory_max), compute s, serial values, measured s)."""
    unit_name = machine.main_unit
    unit = machine.units[unit_name]
    tier = machine.memory[unit.memory]
    out: dict[str, list[tuple]] = {}
    for trace in traces:
        graphs = {}
        for m in trace.medians():
            if m.duration_s <= 0:
                continue
            if m.step not in graphs:
                graphs[m.step] = step_graph(trace, trace.steps[m.step])
            op = graphs[m.step].op(m.name)
            key = _key(stack, op)
            spec = stack.spec(op)
            if key is None or spec.kernels == 0:
                continue
            plain = roofline_cost(op, unit, unit_name, tier)
            mm = unit.efficiency.for_kind(op.kind).memory_max
            walk = serial_values(spec.serial.work, op) if spec.serial is not None else 0.0
            out.setdefault(key, []).append((spec.kernels, spec.traffic * op.bytes / (tier.bandwidth_bytes_per_s * mm),
                                            plain.compute_s, walk, m.duration_s))
    return out


def _predict(x, k, mem, comp, walk):
    floor, eff = 10 ** x[0], x[1]
    serial = 10 ** x[2] * walk if len(x) > 2 else 0.0
    return k * floor + np.maximum(np.maximum(comp, mem / eff), serial)


def fit_stack(traces: list[Trace], machine: Machine, stack: Stack) -> list[SpecFit]:
    from scipy.optimize import least_squares   # slow to import: only when fitting
    out = []
    for key, rows in sorted(_rows(traces, machine, stack).items()):
        k, mem, comp, walk, meas = (np.asarray(c, dtype=float) for c in zip(*rows))
        if len(rows) < MIN_OPS or mem.max() < MIN_SPAN * mem.min():
            out.append(SpecFit(key, len(rows), None, None, float("nan")))
            continue
        # A serial walk is fitted where the ops take at least two walk lengths (else it is a floor).
        serial = len(set(walk[walk > 0])) > 1
        x0, lo, hi = ([-5.9, 0.8, -7.0], [-8.0, 0.05, -9.0], [-4.0, 1.5, -5.0]) if serial else \
            ([-5.9, 0.8], [-8.0, 0.05], [-4.0, 1.5])
        res = least_squares(lambda x: np.log(_predict(x, k, mem, comp, walk)) - np.log(meas), x0, bounds=(lo, hi))
        pred = _predict(res.x, k, mem, comp, walk)
        out.append(SpecFit(key, len(rows), float(10 ** res.x[0]), float(res.x[1]),
                           float(np.mean(np.abs(pred - meas) / meas)),
                           float(10 ** res.x[2]) if serial else None))
    return out
