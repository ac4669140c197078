"""What a measured step's time is, and how the host and the device shared it.

On a trace with device activity (CUDA) an op's measured time is its kernels'
device time, and a step's measured time is the sum of its ops' device times:
under the profiler, eager torch launches kernels from Python one by one, and a
decode step's wall time is mostly the host launching (the H200 captures in
traces/h200: 47-70 ms of wall for ~2 ms of kernels per Llama-2-70B decode
step). The step's host wall time (its `stepN.*` annotation), the host launch
time (the sum of its op annotations' host ranges) and the device-busy span
(first kernel start to last kernel end) are reported beside it, labelled.
A step is launch-bound when the host took longer to launch its kernels than
the device took to run them.

On a CPU trace the op annotation is the op's time, and a step's measured time
is its wall time when the trace has one (it also holds the Python between ops
and the argmax), else the sum of its ops.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from sim.apps.trace.records import MeasuredOp, Trace

DEVICE = "device (sum of op kernels)"
WALL = "wall (step annotation)"
OPS = "sum of ops"


@dataclass(frozen=True)
class StepTiming:
    label: str
    phase: str
    ops_s: float                        # sum of the step's measured op times (median over repeats)
    measured_s: float                   # the step's measured time: see measured_from
    measured_from: str                  # DEVICE, WALL or OPS
    host_wall_s: float | None = None    # the step annotation's duration
    host_launch_s: float | None = None  # sum of the op annotations' host ranges (device traces)
    device_busy_span_s: float | None = None  # first kernel start to last kernel end (Chrome GPU traces)

    @property
    def launch_bound(self) -> bool:
        return self.measured_from == DEVICE and self.host_launch_s is not None and self.host_launch_s > self.ops_s

    @property
    def launch_factor(self) -> float | None:
        """Host launch time over device time (> 1: launch-bound)."""
        if self.measured_from != DEVICE or not self.host_launch_s or not self.ops_s:
            return None
        return self.host_launch_s / self.ops_s

    def to_json(self) -> dict:
        return {"step": self.label, "measured_s": self.measured_s, "measured_from": self.measured_from,
                "ops_s": self.ops_s, "host_wall_s": self.host_wall_s, "host_launch_s": self.host_launch_s,
                "device_busy_span_s": self.device_busy_span_s, "launch_bound": self.launch_bound}


def _busy_span(ops: list[MeasuredOp]) -> float | None:
    spans = [o.device_span_s for o in ops if o.device_span_s is not None]
    if not spans or any(o.repeat for o in ops):  # repeated ops (vidur) interleave: no single span
        return None
    return max(e for _, e in spans) - min(s for s, _ in spans)


def step_timings(trace: Trace) -> list[StepTiming]:
    """One StepTiming per step of the trace, in step order."""
    medians: dict[int, list[MeasuredOp]] = {}
    for m in trace.medians():
        medians.setdefault(m.step, []).append(m)
    raw: dict[int, list[MeasuredOp]] = {}
    for m in trace.ops:
        raw.setdefault(m.step, []).append(m)
    out = []
    for j, shape in enumerate(trace.steps):
        ops = medians.get(j, [])
        ops_s = sum(m.duration_s for m in ops)
        if trace.device != "cpu":
            launch = sum(m.cpu_duration_s for m in ops)
            out.append(StepTiming(shape.label, shape.phase, ops_s, ops_s, DEVICE, shape.wall_s, launch or None,
                                  _busy_span(raw.get(j, []))))
        elif shape.wall_s:
            out.append(StepTiming(shape.label, shape.phase, ops_s, shape.wall_s, WALL, shape.wall_s))
        else:
            out.append(StepTiming(shape.label, shape.phase, ops_s, ops_s, OPS))
    return out


def launch_note(timings: list[StepTiming]) -> str | None:
    """One sentence when a capture was launch-bound, else None."""
    bound = [t for t in timings if t.launch_bound]
    if not bound:
        return None
    factor = statistics.median(t.launch_factor for t in bound)
    host = statistics.median(t.host_launch_s for t in bound)
    dev = statistics.median(t.ops_s for t in bound)
    return (f"launch-bound capture: in {len(bound)} of {len(timings)} steps the host took longer to launch the "
            f"kernels than the device took to run them (median {factor:.1f}x: host launch {host * 1e3:.3g} ms vs "
            f"device {dev * 1e3:.3g} ms per step); eager torch runs at the host's pace here, the device times "
            "are what the hardware did")
