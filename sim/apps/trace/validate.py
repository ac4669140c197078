"""Compare measured ops with the simulator's prediction of the same ops.

Each measured step is lowered again (sim.apps.trace.shapes), planned by the
machine's mapper, run on the engine, and each op's simulated time set beside
its measured time (the median over repeats, vidur's statistic). Errors are
signed fractions, (simulated - measured) / measured; MAPE is the mean of their
absolute values, overall and by op kind. A step's measured time is chosen by
sim.apps.trace.timing: on a trace with device activity the sum of its ops'
kernel (device) time, compared with the sum of the same ops simulated; on a CPU
trace its wall time (the step annotation) when it has one, compared with the
simulated makespan, else the sum of its ops. Host wall, host launch and
device-busy times ride along, labelled, but are not what the error measures.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from hw_models.op_cost import OpCost
from hw_models.registry import mapper_for
from hw_models.machine import Machine
from sim.core.engine import Timeline, run
from sim.core.errors import ConfigError
from sim.core.graph import OpGraph
from sim.apps.trace.records import StepShape, Trace
from sim.apps.trace.shapes import step_graph, weight_overrides
from sim.apps.trace.timing import WALL, StepTiming, step_timings
from sim.core.workload import Formats, Workload


@dataclass(frozen=True)
class OpRow:
    source: str
    step: str
    op: str
    kind: str
    measured_s: float
    simulated_s: float
    flops: float = 0.0
    bytes: float = 0.0
    tokens: int = 0

    @property
    def error(self) -> float:
        return (self.simulated_s - self.measured_s) / self.measured_s


@dataclass(frozen=True)
class StepRow:
    source: str
    step: str
    tokens: int
    measured_s: float
    simulated_s: float
    measured_from: str        # sim.apps.trace.timing: DEVICE, WALL or OPS
    timing: StepTiming | None = None   # host wall, host launch, device-busy span of the measured step

    @property
    def error(self) -> float:
        return (self.simulated_s - self.measured_s) / self.measured_s

    @property
    def launch_bound(self) -> bool:
        return self.timing is not None and self.timing.launch_bound


@dataclass
class Validation:
    machine: str
    stack: str | None = None
    ops: list[OpRow] = field(default_factory=list)
    steps: list[StepRow] = field(default_factory=list)

    @property
    def mape(self) -> float:
        return mape(self.ops)

    def mape_by_kind(self) -> dict[str, float]:
        kinds = sorted({r.kind for r in self.ops})
        return {k: mape([r for r in self.ops if r.kind == k]) for k in kinds}

    def mape_by_op(self) -> dict[str, float]:
        names = list(dict.fromkeys(_base(r.op) for r in self.ops))
        return {n: mape([r for r in self.ops if _base(r.op) == n]) for n in names}

    def to_json(self) -> dict:
        return {
            "machine": self.machine, "stack": self.stack, "mape": self.mape, "mape_by_kind": self.mape_by_kind(),
            "max_abs_step_error": max((abs(s.error) for s in self.steps), default=0.0),
            "ops": [dict(asdict(r), error=r.error) for r in self.ops],
            "steps": [dict(asdict(s), error=s.error, launch_bound=s.launch_bound,
                           timing=s.timing.to_json() if s.timing else None) for s in self.steps],
        }


def _base(name: str) -> str:
    return name.split(".", 1)[1] if name[:1] == "L" and "." in name and name[1].isdigit() else name


def mape(rows: Iterable[OpRow | StepRow]) -> float:
    errs = [abs(r.error) for r in rows if r.measured_s > 0]
    return statistics.fmean(errs) if errs else math.nan


def trace_workload(trace: Trace, step: StepShape, stack: str | None = None) -> Workload:
    """A workload describing the traced step, for the machine's mapper, run under
    the software stack `stack` (hw_models/stack/presets; None: one kernel per op)."""
    fmt = Formats(weights=trace.weights or trace.dtype, activations=trace.dtype, kv_cache=trace.dtype,
                  overrides=weight_overrides(trace.dtype, trace.weights))
    prompt = step.kv_len if step.phase == "prefill" else step.kv_len - step.q_len
    return Workload(name=Path(trace.source).name, model=trace.model.to_dict(), batch=step.batch,
                    prompt_len=max(prompt, 1), gen_len=1, formats=fmt, flash_attention=trace.flash, stack=stack)


@dataclass
class SimulatedStep:
    graph: OpGraph
    timeline: Timeline
    per_op_s: dict[str, float]
    costs: dict[str, OpCost]

    @property
    def makespan_s(self) -> float:
        return self.timeline.makespan_s


def simulate_step(trace: Trace, step: StepShape, machine: Machine, stack: str | None = None) -> SimulatedStep:
    """Lower, plan and run one traced step on `machine`: per-op busy time summed
    over the op's tasks (a mapper may split an op into several)."""
    graph = step_graph(trace, step)
    mapper = mapper_for(machine, trace_workload(trace, step, stack), trace.model)
    tasks = mapper.plan_step(graph)
    timeline = run(tasks, mapper.resources(), mapper.containers())
    per_op: dict[str, float] = {}
    costs: dict[str, OpCost] = {}
    for iv in timeline.intervals:
        name = iv.tag.op.name if isinstance(iv.tag, OpCost) else iv.task
        per_op[name] = per_op.get(name, 0.0) + iv.duration_s
        if isinstance(iv.tag, OpCost):
            costs.setdefault(name, iv.tag)
    return SimulatedStep(graph, timeline, per_op, costs)


def validate(traces: Iterable[Trace], machine: Machine, steps: Iterable[int] | None = None,
             stack: str | None = None) -> Validation:
    """Per-op and per-step error of `machine` (under software stack `stack`) on the traces."""
    out = Validation(machine.name, stack=stack)
    only = set(steps) if steps is not None else None
    sources = []
    for trace in traces:
        sources.append(str(trace.source))
        measured = trace.medians()
        timings = step_timings(trace)
        by_step: dict[int, list] = {}
        for m in measured:
            by_step.setdefault(m.step, []).append(m)
        for j, ops in by_step.items():
            if only is not None and j not in only:
                continue
            shape = trace.steps[j]
            sim = simulate_step(trace, shape, machine, stack)
            for m in ops:
                if m.name not in sim.per_op_s:
                    # Under a stack the graph is the engine's (fused attention, fused projections): a trace of another
                    # op structure names ops it lacks (a trial's eager CPU capture under --stack vllm).
                    why = (f"; stack {stack!r} builds another op structure (its fused kernels) than the capture ran: "
                           "give the stack the capture ran under, or none") if stack else ""
                    raise ConfigError(f"{trace.source}: op {m.name!r} of {shape.label} is not in the simulated "
                                      f"graph{why}")
                if m.duration_s <= 0:
                    continue  # an op with no measurable time (e.g. a 0-us memset only) has no relative error
                op = sim.graph.op(m.name)
                out.ops.append(OpRow(trace.source, shape.label, m.name, m.kind, m.duration_s, sim.per_op_s[m.name],
                                     op.flops, op.bytes, shape.tokens))
            measured_names = {m.name for m in ops}
            tm = timings[j]
            if tm.measured_from == WALL:
                simulated = sim.makespan_s
            else:  # only the measured ops, both sides
                simulated = sum(s for n, s in sim.per_op_s.items() if n in measured_names)
            out.steps.append(StepRow(trace.source, shape.label, shape.tokens, tm.measured_s, simulated,
                                     tm.measured_from, tm))
    if not out.ops:
        raise ConfigError(f"{', '.join(sources) or 'the traces'}: no measured ops to validate")
    return out
