"""How much of a measured run no op model can explain: the error floors that a
validation's figures should be read against.

* the step gap: a step's wall time minus the sum of its annotated ops (the
  Python and dispatch between `record_function` ranges, the argmax), which no
  per-op model sees;
* the within-run floor: the MAPE of predicting each op by the median of the
  same op (same base name, same phase) in the same run, i.e. the repeat-to-repeat
  spread of identical work;
* the cross-run floor: the MAPE of predicting each op of a test run by the
  median of the same op in a calibration run of identical op shapes (a perfect
  lookup table fitted on the calibration set), i.e. how much whole runs differ.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from sim.core import graph as g
from sim.apps.trace.records import Trace
from sim.apps.trace.validate import _base

# Kinds whose decode-step shapes do not depend on the KV length: the same op has the
# same shape in every decode step of runs that differ only in prompt length.
KV_FREE_KINDS = (g.GEMM, g.NORM, g.ELEMENTWISE, g.ROPE, g.EMBED)


@dataclass(frozen=True)
class StepGap:
    phase: str
    wall_s: float       # median over the trace's steps of this phase
    ops_s: float        # median sum of the step's op times
    gap_s: float        # median of wall - sum of ops
    ops: int            # ops per step

    @property
    def gap_per_op_s(self) -> float:
        return self.gap_s / self.ops if self.ops else 0.0

    @property
    def fraction(self) -> float:
        return self.gap_s / self.wall_s if self.wall_s else 0.0


def step_gaps(trace: Trace) -> dict[str, StepGap]:
    """Per phase: the medians of step wall time, summed op time and their difference.
    Steps without a wall time (no step annotation) are skipped."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for op in trace.ops:
        by_step[op.step].append(op.duration_s)
    rows: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for j, shape in enumerate(trace.steps):
        if shape.wall_s and by_step.get(j):
            rows[shape.phase].append((shape.wall_s, sum(by_step[j]), len(by_step[j])))
    med = statistics.median
    return {ph: StepGap(ph, med(r[0] for r in rs), med(r[1] for r in rs), med(r[0] - r[1] for r in rs),
                        int(med(r[2] for r in rs))) for ph, rs in rows.items()}


def within_run_floor(trace: Trace) -> float:
    """MAPE of each op instance against the median of its (phase, base name) group,
    in sample: the spread of repeated identical ops (attention ops also vary with the
    KV length across decode steps, which this counts as spread)."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for m in trace.medians():
        if m.duration_s > 0:
            groups[(trace.steps[m.step].phase, _base(m.name))].append(m.duration_s)
    errs = [abs(statistics.median(xs) - x) / x for xs in groups.values() for x in xs]
    return statistics.fmean(errs) if errs else float("nan")


def cross_run_floor(fit: Trace, test: Trace, kinds: tuple[str, ...] = KV_FREE_KINDS) -> tuple[float, int]:
    """(MAPE, ops) of predicting each decode op of `test` of one of `kinds` by the
    median of the same op in `fit`'s decode steps. Meaningful when both runs have the
    same model and batch (the shapes of those kinds then match exactly)."""
    ref: dict[str, list[float]] = defaultdict(list)
    for m in fit.medians():
        if fit.steps[m.step].phase == "decode" and m.kind in kinds and m.duration_s > 0:
            ref[_base(m.name)].append(m.duration_s)
    errs = []
    for m in test.medians():
        name = _base(m.name)
        if test.steps[m.step].phase == "decode" and m.kind in kinds and m.duration_s > 0 and name in ref:
            errs.append(abs(statistics.median(ref[name]) - m.duration_s) / m.duration_s)
    return (statistics.fmean(errs) if errs else float("nan")), len(errs)


def decode_wall_floor(fit: Trace, test: Trace) -> float:
    """MAPE of predicting each decode step's wall time of `test` by the median decode
    step of `fit` (same model and batch: decode steps differ only in KV length)."""
    ref = statistics.median(s.wall_s for s in fit.steps if s.phase == "decode" and s.wall_s)
    walls = [s.wall_s for s in test.steps if s.phase == "decode" and s.wall_s]
    return statistics.fmean(abs(ref - w) / w for w in walls) if walls else float("nan")
