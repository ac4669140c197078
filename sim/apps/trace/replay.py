"""Replay a measured run on other hardware.

Each traced step is rebuilt (op sequence, shapes and data dependencies through
sim.apps.trace.shapes), planned by the target machine's mapper and run on the
engine. On the hardware the trace was measured on, each op keeps its measured
time (its tasks are scaled to it) and only unmeasured ops are simulated, so
the replayed total is the measured run's, rescheduled; on other hardware every
op is predicted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from hw_models.base import OpCost
from hw_models.registry import mapper_for
from hw_models.machine import Machine
from sim.core.engine import run
from sim.apps.trace.parser import Trace
from sim.apps.trace.shapes import step_graph
from sim.apps.trace.validate import trace_workload


@dataclass(frozen=True)
class ReplayOp:
    step: str
    op: str
    kind: str
    measured_s: float | None
    predicted_s: float
    kept: bool            # measured time kept (same hardware)


@dataclass
class ReplayStep:
    step: str
    measured_s: float     # wall time of the step where traced, else the sum of its measured ops
    predicted_s: float    # makespan on the target


@dataclass
class Replay:
    source: str
    machine: str
    same_hardware: bool
    ops: list[ReplayOp] = field(default_factory=list)
    steps: list[ReplayStep] = field(default_factory=list)

    @property
    def measured_s(self) -> float:
        return sum(s.measured_s for s in self.steps)

    @property
    def predicted_s(self) -> float:
        return sum(s.predicted_s for s in self.steps)

    @property
    def speedup(self) -> float:
        return self.measured_s / self.predicted_s if self.predicted_s else float("inf")

    def to_json(self) -> dict:
        return {"source": self.source, "machine": self.machine, "same_hardware": self.same_hardware,
                "measured_s": self.measured_s, "predicted_s": self.predicted_s, "speedup": self.speedup,
                "steps": [vars(s) for s in self.steps], "ops": [vars(o) for o in self.ops]}


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def same_hardware(trace: Trace, machine: Machine) -> bool:
    """Whether `machine` is the device the trace ran on: its preset name (minus a
    `_calibrated`-style suffix) appears in the traced device's name
    (a6000 in "NVIDIA RTX A6000")."""
    name = _norm(machine.name.split("_")[0])
    return bool(name) and bool(trace.device_name) and name in _norm(trace.device_name)


def replay(trace: Trace, machine: Machine, keep_measured: bool | None = None) -> Replay:
    keep = same_hardware(trace, machine) if keep_measured is None else keep_measured
    out = Replay(trace.source, machine.name, keep)
    measured = trace.medians()
    by_step: dict[int, dict[str, float]] = {}
    for m in measured:
        by_step.setdefault(m.step, {})[m.name] = m.duration_s
    for j, shape in enumerate(trace.steps):
        meas = by_step.get(j, {})
        graph = step_graph(trace, shape)
        mapper = mapper_for(machine, trace_workload(trace, shape), trace.model)
        tasks = mapper.plan_step(graph)
        sim_per_op: dict[str, float] = {}
        op_of = {}
        for t in tasks:
            name = t.tag.op.name if isinstance(t.tag, OpCost) else t.id
            op_of[t.id] = name
            sim_per_op[name] = sim_per_op.get(name, 0.0) + t.duration_s
        if keep:  # scale each op's tasks so they add up to its measured time
            tasks = [replace(t, duration_s=t.duration_s * meas[op_of[t.id]] / sim_per_op[op_of[t.id]])
                     if op_of[t.id] in meas and sim_per_op[op_of[t.id]] > 0 else t for t in tasks]
        timeline = run(tasks, mapper.resources(), mapper.containers())
        predicted: dict[str, float] = {}
        for iv in timeline.intervals:
            predicted[op_of[iv.task]] = predicted.get(op_of[iv.task], 0.0) + iv.duration_s
        for op in graph.ops():
            if op.name in meas or not trace.vocabulary == "vidur":
                out.ops.append(ReplayOp(shape.label, op.name, op.kind, meas.get(op.name), predicted.get(op.name, 0.0),
                                        keep and op.name in meas))
        measured_total = shape.wall_s or sum(meas.values())
        if not shape.wall_s:  # compare like with like: only the ops that were measured
            predicted_total = sum(v for k, v in predicted.items() if k in meas)
        else:
            predicted_total = timeline.makespan_s
        out.steps.append(ReplayStep(shape.label, measured_total, predicted_total))
    return out
