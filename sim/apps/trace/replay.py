"""Replay a measured run on other hardware, in two modes.

Each traced step is rebuilt (op sequence, shapes and data dependencies through
sim.apps.trace.shapes), planned by the target machine's mapper and run on the
engine, twice:

* **predicted**: the target machine's model alone (each op as the target's
  mapper costs it). On the traced hardware itself this is the model's error.
* **scaled**: each measured op x predicted_target / predicted_source, where the
  source is the machine the trace was measured on (`--source-hw`, or a preset
  matching the trace's device name). What was measured -- fusion, kernel
  choice, odd shapes -- is kept and only the machine changes; replayed on its
  own source machine, every op keeps exactly its measured time.

A step's measured time follows sim.apps.trace.timing (device time on GPU
traces). A CPU step measured as wall time keeps its time outside the ops (host
Python between them, the argmax) as measured in scaled mode.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from hw_models.op_cost import OpCost
from hw_models.machine import Machine, load_machine, preset_names
from hw_models.registry import machine_data, mapper_for
from sim.core.engine import Task, Timeline, run
from sim.core.errors import ConfigError
from sim.core.settings import dotted_items
from sim.apps.trace.records import Trace
from sim.apps.trace.shapes import step_graph
from sim.apps.trace.timing import WALL, StepTiming, launch_note, step_timings
from sim.apps.trace.validate import trace_workload

PLAIN_KINDS = ("gpu", "cpu")   # presets that model a device as it is (not offload / PIM variants)


@dataclass(frozen=True)
class ReplayOp:
    step: str
    op: str
    kind: str
    measured_s: float | None
    predicted_s: float            # target model alone
    scaled_s: float | None        # measured x target / source; None without a source machine
    scaled_from_measured: bool    # False: the op was not measured or the source costs it 0 (predicted kept)


@dataclass
class ReplayStep:
    step: str
    measured_s: float
    measured_from: str
    predicted_s: float
    scaled_s: float | None
    timing: StepTiming


@dataclass
class Replay:
    source: str
    machine: str
    source_machine: str | None     # the machine the trace was measured on, for scaled mode
    source_from: str               # how it was chosen
    ops: list[ReplayOp] = field(default_factory=list)
    steps: list[ReplayStep] = field(default_factory=list)

    @property
    def measured_s(self) -> float:
        return sum(s.measured_s for s in self.steps)

    @property
    def predicted_s(self) -> float:
        return sum(s.predicted_s for s in self.steps)

    @property
    def scaled_s(self) -> float | None:
        return None if self.source_machine is None else sum(s.scaled_s or 0.0 for s in self.steps)

    @property
    def measured_from(self) -> str:
        return ", ".join(dict.fromkeys(s.measured_from for s in self.steps))

    def speedup(self, mode: str = "predicted") -> float | None:
        total = self.predicted_s if mode == "predicted" else self.scaled_s
        return None if total is None else (self.measured_s / total if total else float("inf"))

    def launch_note(self) -> str | None:
        return launch_note([s.timing for s in self.steps])

    def to_json(self) -> dict:
        return {"source": self.source, "machine": self.machine, "source_machine": self.source_machine,
                "source_from": self.source_from, "measured_from": self.measured_from,
                "measured_s": self.measured_s, "predicted_s": self.predicted_s, "scaled_s": self.scaled_s,
                "speedup_predicted": self.speedup("predicted"), "speedup_scaled": self.speedup("scaled"),
                "launch_note": self.launch_note(),
                "steps": [dict(step=s.step, measured_s=s.measured_s, measured_from=s.measured_from,
                               predicted_s=s.predicted_s, scaled_s=s.scaled_s, timing=s.timing.to_json())
                          for s in self.steps],
                "ops": [vars(o) for o in self.ops]}


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def names_device(machine_name: str, device_name: str) -> bool:
    """Whether a preset names the traced device: its first word (a6000 of
    a6000_calibrated) is a word of the device's name ("NVIDIA RTX A6000")."""
    key = machine_name.split("_")[0].lower()
    return bool(key) and key in _words(device_name)


# A device's own figures: what a what-if changes and a calibration (efficiencies, launch overhead, stacks) does not
_DEVICE_FIGURES = ("_bytes_per_s", "flops_per_s", "_bytes")


def _device_figures(m: Machine) -> dict[str, object]:
    return {k: v for k, v in dotted_items(machine_data(m)) if k.endswith(_DEVICE_FIGURES) and ".efficiency." not in k}


def source_machine(trace: Trace, target: Machine, given: Machine | None = None) -> tuple[Machine | None, str]:
    """The machine the trace was measured on: `given`, else the plainest preset naming the traced device, or the
    target itself where it names the device with that preset's rates and sizes (a calibrated preset of it: the
    measurement is the target's own). A what-if of the device (`--set hw.*=2x`, a renamed copy at another
    bandwidth) keeps the plain preset as its source: it had been its own, so the scaled figure read the measured
    time whatever changed (a trace trial's 2x-bandwidth H200 at 1.00x). None when no preset names the device."""
    if given is not None:
        return given, "--source-hw"
    device = trace.device_name
    how = f"the trace's device name {device!r}"
    names = [n for n in preset_names() if names_device(n, device)]
    plain = [m for m in (load_machine(n) for n in sorted(names, key=lambda n: (len(n), n))) if m.kind in PLAIN_KINDS]
    if target.kind in PLAIN_KINDS and names_device(target.name, device) and (
            not plain or _device_figures(target) == _device_figures(plain[0])):
        return target, how
    if plain:
        return plain[0], how + ("" if plain[0].name != target.name else ": the preset as shipped, the target's "
                                "figures changed")
    return None, f"no preset names the trace's device {device!r}: give --source-hw for scaled mode"


def _per_op(tasks: list[Task]) -> tuple[dict[str, str], dict[str, float]]:
    op_of, total = {}, {}
    for t in tasks:
        name = t.tag.op.name if isinstance(t.tag, OpCost) else t.id
        op_of[t.id] = name
        total[name] = total.get(name, 0.0) + t.duration_s
    return op_of, total


def _busy_by_op(timeline: Timeline, op_of: dict[str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for iv in timeline.intervals:
        out[op_of[iv.task]] = out.get(op_of[iv.task], 0.0) + iv.duration_s
    return out


def _plan(trace: Trace, shape, machine: Machine, graph, stack: str | None = None) -> tuple[list[Task], object]:
    mapper = mapper_for(machine, trace_workload(trace, shape, stack), trace.model)
    return mapper.plan_step(graph), mapper


def replay(trace: Trace, machine: Machine, source: Machine | None = None, stack: str | None = None) -> Replay:
    """`trace` rebuilt and run on `machine` (and on `source`, for scaled mode), under the software
    stack `stack` on both (hw_models/stacks; None: one kernel per op)."""
    if trace.ops and not any(m.duration_s > 0 for m in trace.ops):
        # A speed-up against nothing measured is not a result (issue 17: a "63.8x" from zero rows).
        raise ConfigError(f"{trace.source}: every measured op lasts 0 s: nothing to replay against")
    src, how = source_machine(trace, machine, source)
    out = Replay(trace.source, machine.name, src.name if src else None, how)
    meas_by_step: dict[int, dict[str, float]] = {}
    for m in trace.medians():
        meas_by_step.setdefault(m.step, {})[m.name] = m.duration_s
    for j, (shape, timing) in enumerate(zip(trace.steps, step_timings(trace))):
        meas = meas_by_step.get(j, {})
        graph = step_graph(trace, shape)
        tasks, mapper = _plan(trace, shape, machine, graph, stack)
        op_of, target_s = _per_op(tasks)
        predicted_tl = run(tasks, mapper.resources(), mapper.containers())
        predicted = _busy_by_op(predicted_tl, op_of)
        scaled, scaled_tl, factor = {}, None, {}
        if src is not None:
            source_s = target_s if src is machine else _per_op(_plan(trace, shape, src, graph, stack)[0])[1]
            factor = {n: meas[n] / source_s[n] for n in meas if source_s.get(n, 0.0) > 0}
            scaled_tasks = [replace(t, duration_s=t.duration_s * factor[op_of[t.id]]) if op_of[t.id] in factor
                            else t for t in tasks]
            scaled_tl = run(scaled_tasks, mapper.resources(), mapper.containers())
            scaled = _busy_by_op(scaled_tl, op_of)
        for op in graph.ops():
            if op.name in meas or trace.vocabulary != "vidur":
                out.ops.append(ReplayOp(shape.label, op.name, op.kind, meas.get(op.name), predicted.get(op.name, 0.0),
                                        scaled.get(op.name) if src else None, op.name in factor))
        whole = timing.measured_from == WALL or all(op.name in meas for op in graph.ops())

        def total(tl: Timeline, per_op: dict[str, float]) -> float:
            return tl.makespan_s if whole else sum(v for k, v in per_op.items() if k in meas)

        scaled_total = None
        if scaled_tl is not None:
            gap = max(0.0, timing.measured_s - timing.ops_s) if timing.measured_from == WALL else 0.0
            scaled_total = total(scaled_tl, scaled) + gap
        out.steps.append(ReplayStep(shape.label, timing.measured_s, timing.measured_from,
                                    total(predicted_tl, predicted), scaled_total, timing))
    if not out.steps:
        raise ConfigError(f"{trace.source}: no steps to replay")
    return out
